import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { readHumanRequest, readTask } from '@troupe/client';
import { type Gateway, hashToken, startGateway, type TokenEntry, TokenStore } from '@troupe/gateway';
import { createLogger } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  examplePath,
  fixturePath,
  found,
  type Harness,
  ofKind,
  repoRoot,
  startHarness,
} from './support/harness.ts';

const TOKENS = {
  admin: 'mcp-admin-token-0123456789abcdef',
  tabulatedOnly: 'mcp-tabulated-token-0123456789ab',
  reader: 'mcp-reader-token-0123456789abcdef',
  revoked: 'mcp-revoked-token-0123456789abcd',
  submitter: 'mcp-submitter-token-0123456789ab',
  revokedModern: 'mcp-revoked-modern-token-012345',
  otherAdmin: 'mcp-other-admin-token-0123456789',
};

type Mode = 'legacy' | 'auto';
type ElicitAnswer = {
  action: 'accept' | 'decline' | 'cancel';
  content?: Record<string, string | number | boolean | string[]>;
};
interface Elicited {
  message: string;
  requestedSchema: unknown;
}

/** The task id a pipeline tool's progress names (`task <id> submitted to <pipeline>`). */
const submittedTask = (messages: string[]) =>
  messages.map((m) => /^task (\S+) submitted to /.exec(m)?.[1]).find((id) => id !== undefined);

const TOKEN_ENTRIES: TokenEntry[] = [
  { name: 'ops', sha256: hashToken(TOKENS.admin), scopes: ['admin'] },
  {
    name: 'counter',
    sha256: hashToken(TOKENS.tabulatedOnly),
    scopes: ['submit', 'approve'],
    pipelines: ['tabulated'],
  },
  { name: 'watcher', sha256: hashToken(TOKENS.reader), scopes: ['read'] },
  { name: 'temp', sha256: hashToken(TOKENS.revoked), scopes: ['admin'] },
  { name: 'runner', sha256: hashToken(TOKENS.submitter), scopes: ['submit'] },
  { name: 'temp-modern', sha256: hashToken(TOKENS.revokedModern), scopes: ['admin'] },
  { name: 'ops2', sha256: hashToken(TOKENS.otherAdmin), scopes: ['admin'] },
];

describe('the MCP server on the gateway: pipelines as tools over streamable HTTP', () => {
  let h: Harness;
  let gateway: Gateway;
  let dir: string;
  let tokensFile: string;
  let tokens: TokenStore;
  const writeTokens = (entries: TokenEntry[]) => writeFile(tokensFile, JSON.stringify({ tokens: entries }));
  const clients: Client[] = [];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'troupe-mcp-'));
    tokensFile = join(dir, 'tokens.yaml');
    await writeTokens(TOKEN_ENTRIES);
    tokens = await TokenStore.load(tokensFile, {});
    h = await startHarness([
      fixturePath('tabulated.yaml'),
      fixturePath('gated.yaml'),
      fixturePath('slowpoke.yaml'),
      fixturePath('confirming.yaml'),
      fixturePath('asker.yaml'),
      examplePath('demo.yaml'),
    ]);
    gateway = await startGateway({
      bus: h.bus,
      logger: createLogger({ level: 'silent' }),
      tokens,
      port: 0,
      dashboardDir: false,
    });
  });
  afterAll(async () => {
    for (const client of clients) await client.close().catch(() => undefined);
    await gateway?.close();
    await h?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** An MCP client of the official SDK on `/mcp`: 2025-11-25 (`legacy`) or negotiated (`auto`, 2026-07-28 here). */
  async function connect(
    token: keyof typeof TOKENS,
    mode: Mode,
    elicit?: (asked: Elicited) => ElicitAnswer,
  ): Promise<Client> {
    const client = new Client(
      { name: `mcp-test-${mode}`, version: '1.0.0' },
      { capabilities: elicit ? { elicitation: { form: {} } } : {}, versionNegotiation: { mode } },
    );
    if (elicit) {
      client.setRequestHandler('elicitation/create', async (request) =>
        elicit(request.params as unknown as Elicited),
      );
    }
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${gateway.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${TOKENS[token]}` } },
      }),
    );
    clients.push(client);
    return client;
  }

  it('negotiates 2025-11-25 with a legacy client and 2026-07-28 with an auto one, on the one endpoint', async () => {
    expect((await connect('admin', 'legacy')).getProtocolEra()).toBe('legacy');
    expect((await connect('admin', 'auto')).getProtocolEra()).toBe('modern');
  });

  it('lists each pipeline as a tool with its input and, when it declares one, its output schema', async () => {
    const { tools } = await (await connect('admin', 'legacy')).listTools();
    expect(tools.map((t) => t.name).sort()).toEqual([
      'asker',
      'confirming',
      'demo',
      'gated',
      'slowpoke',
      'tabulated',
      'troupe_cancel',
      'troupe_fork',
      'troupe_get',
      'troupe_pause',
      'troupe_restart',
      'troupe_resume',
      'troupe_start',
      'troupe_tell',
    ]);
    const tabulated = tools.find((t) => t.name === 'tabulated');
    expect(tabulated?.description).toContain('Count the words of the goal');
    // The goal, and the input the pipeline declares.
    expect(tabulated?.inputSchema).toMatchObject({
      type: 'object',
      properties: {
        goal: { type: 'string' },
        input: { type: 'object', properties: { language: { type: 'string', enum: ['en', 'fr'] } } },
      },
      required: ['goal'],
    });
    expect(tools.find((t) => t.name === 'demo')?.inputSchema).toMatchObject({
      properties: { input: { type: 'object' } },
    });
    expect(tabulated?.outputSchema).toMatchObject({
      type: 'object',
      properties: { words: { type: 'integer' }, summary: { type: 'string' } },
      required: ['words', 'summary'],
    });
    // A pipeline whose last reply is free text declares no output schema.
    expect(tools.find((t) => t.name === 'demo')?.outputSchema).toBeUndefined();
  });

  for (const mode of ['legacy', 'auto'] as const) {
    it(`runs a pipeline to completion: its output as text and structuredContent, with progress (${mode})`, async () => {
      const client = await connect('admin', mode);
      const progress: string[] = [];
      const result = await client.callTool(
        { name: 'tabulated', arguments: { goal: 'count these words' } },
        { onprogress: (p) => void progress.push(p.message ?? '') },
      );
      expect(result.isError).toBeFalsy();
      expect(result.structuredContent).toEqual({ words: 3, summary: 'three words' });
      const text = result.content.find((c) => c.type === 'text');
      expect(JSON.parse(text?.type === 'text' ? text.text : '')).toEqual({
        words: 3,
        summary: 'three words',
      });
      const taskId = result._meta?.['troupe/taskId'] as string;
      expect((await readTask(h.bus, taskId)).status).toBe('completed');
      expect(progress[0]).toBe(`task ${taskId} submitted to tabulated`);
      expect(progress).toContain('step count started (agent counter)');
      expect(result.content).toContainEqual(
        expect.objectContaining({ type: 'resource_link', uri: `troupe://tasks/${taskId}/trace` }),
      );
    });

    it(`cancels the task when the client cancels its call (${mode})`, async () => {
      const client = await connect('admin', mode);
      const progress: string[] = [];
      const stop = new AbortController();
      const call = client.callTool(
        { name: 'slowpoke', arguments: { goal: 'think for a long time' } },
        {
          signal: stop.signal,
          onprogress: (p) => {
            progress.push(p.message ?? '');
            // The planner's model call takes 30 s: cancel once its step has started.
            if (p.message?.startsWith('step plan started')) stop.abort('the user stopped it');
          },
        },
      );
      await expect(call).rejects.toThrow(/the user stopped it/);
      const taskId = submittedTask(progress);
      expect(taskId).toBeDefined();
      const final = await h.finalOf(taskId as string, 20_000);
      expect(final.kind).toBe('task.cancelled');
      expect(final.kind === 'task.cancelled' ? final.data.reason : '').toContain(
        `the MCP client mcp-test-${mode} cancelled its call`,
      );
    });

    it(`asks the user for an approval through elicitation; accepting allows the call (${mode})`, async () => {
      const asked: Elicited[] = [];
      const client = await connect('admin', mode, (request) => {
        asked.push(request);
        return { action: 'accept', content: { decision: 'allow', reason: 'looks fine' } };
      });
      const result = await client.callTool({ name: 'gated', arguments: { goal: 'ship the release' } });
      expect(result.isError).toBeFalsy();
      expect(asked).toHaveLength(1);
      expect(asked[0]?.message).toContain('agent executor asks to run write_file');
      expect(asked[0]?.requestedSchema).toMatchObject({
        type: 'object',
        properties: { decision: { type: 'string', enum: ['allow', 'deny'] } },
        required: ['decision'],
      });
      const taskId = result._meta?.['troupe/taskId'] as string;
      const decided = ofKind(h.eventsOf(taskId), 'approval.decided');
      expect(decided).toHaveLength(1);
      expect(decided[0]?.data).toMatchObject({ decision: 'allow', reason: 'looks fine' });
      expect(decided[0]?.data.by).toContain(`mcp-test-${mode} (MCP)`);
      const write = ofKind(h.eventsOf(taskId), 'tool.result').find(
        (e) => e.data.tool === 'write_file' && e.data.ok,
      );
      expect(write).toBeDefined();
      expect(ofKind(h.eventsOf(taskId), 'tool.result').every((e) => e.data.ok)).toBe(true);
    });

    it(`declining the elicitation denies the approval, with the reason, and the task goes on (${mode})`, async () => {
      const client = await connect('admin', mode, () => ({ action: 'decline' }));
      const result = await client.callTool({ name: 'gated', arguments: { goal: 'ship the release' } });
      const taskId = result._meta?.['troupe/taskId'] as string;
      const decided = ofKind(h.eventsOf(taskId), 'approval.decided');
      expect(decided).toHaveLength(1);
      expect(decided[0]?.data.decision).toBe('deny');
      expect(decided[0]?.data.reason).toBe(`the user declined it in mcp-test-${mode} (MCP)`);
      const request = await readHumanRequest(h.bus, decided[0]?.data.approvalId as string);
      expect(request?.status).toBe('denied');
      // The agent was told no, and finished without the release file.
      expect((await readTask(h.bus, taskId)).status).toBe('completed');
      const refused = ofKind(h.eventsOf(taskId), 'tool.result').find((e) => !e.data.ok);
      expect(refused?.data.tool).toBe('write_file');
    });
  }

  it('cancelling the call while its user is being asked (2025-11-25) cancels the task', async () => {
    const stop = new AbortController();
    let asked = false;
    // A host that can ask (declared here), whose user never answers: the call is cancelled while they are asked.
    const client = await connect('admin', 'legacy', () => ({ action: 'cancel' }));
    client.setRequestHandler('elicitation/create', async () => {
      asked = true;
      stop.abort('the user closed the dialog');
      return new Promise(() => {});
    });
    const progress: string[] = [];
    const call = client.callTool(
      { name: 'gated', arguments: { goal: 'ship the release' } },
      { signal: stop.signal, onprogress: (p) => void progress.push(p.message ?? '') },
    );
    await expect(call).rejects.toThrow(/closed the dialog/);
    expect(asked).toBe(true);
    const taskId = submittedTask(progress) as string;
    expect((await h.finalOf(taskId, 20_000)).kind).toBe('task.cancelled');
  });

  it("records a decision made in a client whose name is longer than a decision's `by` holds", async () => {
    const name = `host-${'x'.repeat(300)}`;
    const client = new Client(
      { name, version: '1.0.0' },
      { capabilities: { elicitation: { form: {} } }, versionNegotiation: { mode: 'auto' } },
    );
    client.setRequestHandler('elicitation/create', async () => ({
      action: 'accept',
      content: { decision: 'allow' },
    }));
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${gateway.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${TOKENS.admin}` } },
      }),
    );
    clients.push(client);
    const result = await client.callTool(
      { name: 'gated', arguments: { goal: 'ship the release' } },
      { timeout: 20_000 },
    );
    expect(result.isError).toBeFalsy();
    const taskId = result._meta?.['troupe/taskId'] as string;
    const decided = ofKind(h.eventsOf(taskId), 'approval.decided');
    expect(decided.map((e) => e.data.decision)).toEqual(['allow']);
    expect(decided[0]?.data.by).toMatch(/^host-x{95}… \(MCP\) \(token ops\)$/);
  });

  it('a 2026-07-28 requestState is refused on a retry with another token, and answers nothing', async () => {
    let swapped = false;
    const client = new Client(
      { name: 'mcp-test-swap', version: '1.0.0' },
      { capabilities: { elicitation: { form: {} } }, versionNegotiation: { mode: 'auto' } },
    );
    client.setRequestHandler('elicitation/create', async () => ({
      action: 'accept',
      content: { decision: 'allow' },
    }));
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${gateway.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${TOKENS.admin}` } },
        // The retry that carries the state minted for `ops` is sent with the token of `ops2`.
        fetch: async (url, init) => {
          if (typeof init?.body !== 'string' || !init.body.includes('"requestState"'))
            return fetch(url, init);
          swapped = true;
          const headers = new Headers(init.headers);
          headers.set('authorization', `Bearer ${TOKENS.otherAdmin}`);
          return fetch(url, { ...init, headers });
        },
      }),
    );
    clients.push(client);
    const progress: string[] = [];
    const call = client.callTool(
      { name: 'gated', arguments: { goal: 'ship the release' } },
      { onprogress: (p) => void progress.push(p.message ?? '') },
    );
    await expect(call).rejects.toThrow(/requestState/);
    expect(swapped).toBe(true);
    const taskId = submittedTask(progress) as string;
    const [waiting] = ofKind(h.eventsOf(taskId), 'approval.requested');
    expect(waiting).toBeDefined();
    expect((await readHumanRequest(h.bus, waiting?.data.approvalId as string))?.status).toBe('pending');
    await fetch(`${gateway.url}/v1/tasks/${taskId}/cancel`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKENS.admin}`, 'content-type': 'application/json' },
      body: JSON.stringify({ reason: 'cleaned up by the test' }),
    });
  });

  it("asks a human step's question with the form its answer schema declares (2026-07-28)", async () => {
    const asked: Elicited[] = [];
    const client = await connect('admin', 'auto', (request) => {
      asked.push(request);
      return { action: 'accept', content: { ship: false } };
    });
    const result = await client.callTool({ name: 'confirming', arguments: { goal: 'release 1.2' } });
    expect(result.isError).toBeFalsy();
    expect(asked[0]?.message).toContain('Ship the draft?');
    expect(asked[0]?.requestedSchema).toEqual({
      type: 'object',
      properties: { ship: { type: 'boolean' } },
      required: ['ship'],
    });
    const taskId = result._meta?.['troupe/taskId'] as string;
    expect(ofKind(h.eventsOf(taskId), 'human.answered')[0]?.data.answer).toBe('{"ship":false}');
    // {"ship": false}: the shipping step was skipped.
    expect(ofKind(h.eventsOf(taskId), 'step.skipped').map((e) => e.data.step)).toEqual(['ship']);
  });

  it("asks an agent's question for text (2025-11-25)", async () => {
    const asked: Elicited[] = [];
    const client = await connect('admin', 'legacy', (request) => {
      asked.push(request);
      return { action: 'accept', content: { answer: 'teal' } };
    });
    const result = await client.callTool({ name: 'asker', arguments: { goal: 'a logo' } });
    expect(result.content[0]).toMatchObject({ type: 'text', text: 'Wrote the colour down.' });
    expect(asked[0]?.message).toContain('executor asks: Which colour should the logo be?');
    expect(asked[0]?.requestedSchema).toMatchObject({ properties: { answer: { type: 'string' } } });
    const taskId = result._meta?.['troupe/taskId'] as string;
    expect(ofKind(h.eventsOf(taskId), 'human.answered')[0]?.data).toMatchObject({
      answer: 'teal',
      by: 'mcp-test-legacy (MCP) (token ops)',
    });
  });

  it('takes an input larger than a NATS message, as the gateway API does', async () => {
    const client = await connect('admin', 'auto');
    const text = 'word '.repeat(300_000);
    const result = await client.callTool({
      name: 'tabulated',
      arguments: { goal: 'count', input: { text } },
    });
    expect(result.isError).toBeFalsy();
    const taskId = result._meta?.['troupe/taskId'] as string;
    const accepted = ofKind(h.eventsOf(taskId), 'task.accepted')[0];
    expect(accepted?.data.inputCut).toBeDefined();
  });

  it('declining a question leaves it open: the call waits until someone answers it elsewhere (2026-07-28)', async () => {
    const client = await connect('admin', 'auto', () => ({ action: 'decline' }));
    const progress: string[] = [];
    const call = client.callTool(
      { name: 'asker', arguments: { goal: 'a logo' } },
      { onprogress: (p) => void progress.push(p.message ?? '') },
    );
    const told = await found(() =>
      progress.find((m) => m.includes('stays open: the user declined the question')),
    );
    const questionId = /troupe answer (\S+) /.exec(told)?.[1];
    const answered = await fetch(`${gateway.url}/v1/approvals/${questionId}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKENS.admin}`, 'content-type': 'application/json' },
      body: JSON.stringify({ answer: 'orange' }),
    });
    expect(answered.status).toBe(200);
    const result = await call;
    expect(result.isError).toBeFalsy();
    const taskId = result._meta?.['troupe/taskId'] as string;
    expect(ofKind(h.eventsOf(taskId), 'human.answered')[0]?.data).toMatchObject({
      answer: 'orange',
      by: 'ops',
    });
  });

  it('refuses input the pipeline does not take, saying which key, and starts no task', async () => {
    const client = await connect('admin', 'auto');
    const before = (await fetch(`${gateway.url}/v1/tasks?pipeline=tabulated&limit=100`, {
      headers: { authorization: `Bearer ${TOKENS.admin}` },
    }).then((r) => r.json())) as { tasks: unknown[] };
    const result = await client.callTool({
      name: 'tabulated',
      arguments: { goal: 'count', input: { language: 'de' } },
    });
    expect(result.isError).toBe(true);
    expect(result.content[0]).toMatchObject({ type: 'text', text: expect.stringMatching(/language/) });
    const after = (await fetch(`${gateway.url}/v1/tasks?pipeline=tabulated&limit=100`, {
      headers: { authorization: `Bearer ${TOKENS.admin}` },
    }).then((r) => r.json())) as { tasks: unknown[] };
    expect(after.tasks).toHaveLength(before.tasks.length);
  });

  it('without the elicitation capability, keeps waiting and says how to decide elsewhere', async () => {
    const client = await connect('admin', 'auto');
    const progress: string[] = [];
    const call = client.callTool(
      { name: 'gated', arguments: { goal: 'ship the release' } },
      { onprogress: (p) => void progress.push(p.message ?? '') },
    );
    const told = await found(() => progress.find((m) => m.includes('this MCP client cannot be asked')));
    const approvalId = /troupe approve (\S+),/.exec(told)?.[1];
    expect(approvalId).toBeDefined();
    expect(told).toContain('or on the dashboard');
    // Someone decides it on the gateway; the call then ends with the task.
    const decided = await fetch(`${gateway.url}/v1/approvals/${approvalId}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKENS.admin}`, 'content-type': 'application/json' },
      body: JSON.stringify({ decision: 'allow' }),
    });
    expect(decided.status).toBe(200);
    const result = await call;
    expect(result.isError).toBeFalsy();
    expect(result.content[0]).toMatchObject({ type: 'text', text: 'Done with the release.' });
  });

  it('does not ask the user for a token that may not approve, even when the host can ask (2025-11-25)', async () => {
    let asked = 0;
    const client = await connect('submitter', 'legacy', () => {
      asked++;
      return { action: 'accept', content: { decision: 'allow' } };
    });
    const progress: string[] = [];
    const call = client.callTool(
      { name: 'gated', arguments: { goal: 'ship the release' } },
      { onprogress: (p) => void progress.push(p.message ?? '') },
    );
    const told = await found(() => progress.find((m) => m.includes('this MCP client cannot be asked')));
    const approvalId = /troupe approve (\S+),/.exec(told)?.[1];
    const decided = await fetch(`${gateway.url}/v1/approvals/${approvalId}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKENS.admin}`, 'content-type': 'application/json' },
      body: JSON.stringify({ decision: 'deny', reason: 'not today' }),
    });
    expect(decided.status).toBe(200);
    const result = await call;
    expect(asked).toBe(0);
    const taskId = result._meta?.['troupe/taskId'] as string;
    expect(ofKind(h.eventsOf(taskId), 'approval.decided')[0]?.data).toMatchObject({
      decision: 'deny',
      reason: 'not today',
      by: 'ops',
    });
  });

  it('a token limited to one pipeline sees and calls only that one', async () => {
    const client = await connect('tabulatedOnly', 'auto');
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual([
      'tabulated',
      'troupe_cancel',
      'troupe_fork',
      'troupe_get',
      'troupe_pause',
      'troupe_restart',
      'troupe_resume',
      'troupe_start',
      'troupe_tell',
    ]);
    await expect(client.callTool({ name: 'gated', arguments: { goal: 'x' } })).rejects.toThrow(/gated/);
    const started = await client.callTool({
      name: 'troupe_start',
      arguments: { pipeline: 'gated', goal: 'x' },
    });
    expect(started.isError).toBe(true);
    // Another pipeline's task is not there for it.
    const admin = await connect('admin', 'auto');
    const other = await admin.callTool({
      name: 'troupe_start',
      arguments: { pipeline: 'demo', goal: 'a note' },
    });
    const otherId = (other.structuredContent as { taskId: string }).taskId;
    await expect(client.readResource({ uri: `troupe://tasks/${otherId}/trace` })).rejects.toThrow(/no task/);
    const got = await client.callTool({ name: 'troupe_get', arguments: { taskId: otherId } });
    expect(got.isError).toBe(true);
  });

  it("a 2025-11-25 session is its token's alone, and ends when its token is revoked", async () => {
    const client = await connect('revoked', 'legacy');
    const sessionId = (client.transport as StreamableHTTPClientTransport).sessionId as string;
    expect(sessionId).toMatch(/^[0-9a-f-]{36}$/);
    // Another token naming that session is told there is none.
    const stolen = await fetch(`${gateway.url}/mcp`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TOKENS.reader}`,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-session-id': sessionId,
        'mcp-protocol-version': '2025-11-25',
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    expect(stolen.status).toBe(404);
    expect(await stolen.json()).toMatchObject({
      error: { message: expect.stringContaining('no MCP session') },
    });
    // A call under way when the token is taken out of the file ends with its session: its task is cancelled.
    const progress: string[] = [];
    const call = client.callTool(
      { name: 'slowpoke', arguments: { goal: 'think' } },
      { timeout: 5_000, onprogress: (p) => void progress.push(p.message ?? '') },
    );
    call.catch(() => undefined);
    const started = await found(() => progress.find((m) => m.startsWith('step plan started')));
    expect(started).toBeDefined();
    await writeTokens(TOKEN_ENTRIES.filter((t) => t.name !== 'temp'));
    // Read at once (the gateway's watch of the file may have taken it already).
    await tokens.reload();
    const final = await h.finalOf(submittedTask(progress) as string, 20_000);
    expect(final.kind).toBe('task.cancelled');
    await expect(client.listTools()).rejects.toThrow();
  });

  it('a 2026-07-28 call under way ends when its token is revoked, and its task is cancelled', async () => {
    const client = await connect('revokedModern', 'auto');
    const progress: string[] = [];
    const call = client.callTool(
      { name: 'slowpoke', arguments: { goal: 'think' } },
      { timeout: 50_000, onprogress: (p) => void progress.push(p.message ?? '') },
    );
    call.catch(() => undefined);
    await found(() => progress.find((m) => m.startsWith('step plan started')));
    await writeTokens(TOKEN_ENTRIES.filter((t) => t.name !== 'temp-modern' && t.name !== 'temp'));
    await tokens.reload();
    // Long before the client would give up, or the planner's 30 s model call would end.
    const final = await h.finalOf(submittedTask(progress) as string, 10_000);
    expect(final.kind).toBe('task.cancelled');
    await client.close();
  });

  for (const mode of ['legacy', 'auto'] as const) {
    it(`a gateway that stops ends its calls but leaves their tasks running (${mode})`, async () => {
      const second = await startGateway({
        bus: h.bus,
        logger: createLogger({ level: 'silent' }),
        tokens,
        port: 0,
        dashboardDir: false,
      });
      const client = new Client({ name: 'leaving', version: '1' }, { versionNegotiation: { mode } });
      await client.connect(
        new StreamableHTTPClientTransport(new URL(`${second.url}/mcp`), {
          requestInit: { headers: { authorization: `Bearer ${TOKENS.admin}` } },
        }),
      );
      const progress: string[] = [];
      const call = client.callTool(
        { name: 'slowpoke', arguments: { goal: 'think' } },
        { timeout: 5_000, onprogress: (p) => void progress.push(p.message ?? '') },
      );
      call.catch(() => undefined);
      await found(() => progress.find((m) => m.startsWith('step plan started')));
      const taskId = submittedTask(progress) as string;
      await second.close();
      await client.close().catch(() => undefined);
      expect((await readTask(h.bus, taskId)).status).toBe('running');
      // Still running: it is cancelled here, by the test, and that is the cancel its events record.
      await fetch(`${gateway.url}/v1/tasks/${taskId}/cancel`, {
        method: 'POST',
        headers: { authorization: `Bearer ${TOKENS.admin}`, 'content-type': 'application/json' },
        body: JSON.stringify({ reason: 'cleaned up by the test' }),
      });
      const final = await h.finalOf(taskId, 20_000);
      expect(final.kind === 'task.cancelled' ? final.data.reason : final.kind).toContain(
        'cleaned up by the test',
      );
    });
  }

  it("calls under way count against the token's NATS consumer cap, as its event streams do", async () => {
    const capped = await startGateway({
      bus: h.bus,
      logger: createLogger({ level: 'silent' }),
      tokens,
      port: 0,
      dashboardDir: false,
      streamCaps: { consumers: 1 },
    });
    try {
      const client = new Client({ name: 'capped', version: '1' }, { versionNegotiation: { mode: 'auto' } });
      await client.connect(
        new StreamableHTTPClientTransport(new URL(`${capped.url}/mcp`), {
          requestInit: { headers: { authorization: `Bearer ${TOKENS.admin}` } },
        }),
      );
      const stop = new AbortController();
      const progress: string[] = [];
      const first = client.callTool(
        { name: 'slowpoke', arguments: { goal: 'think' } },
        { signal: stop.signal, onprogress: (p) => void progress.push(p.message ?? '') },
      );
      first.catch(() => undefined);
      await found(() => progress.find((m) => m.startsWith('step plan started')));
      const tabulatedTasks = async () =>
        (
          (await fetch(`${gateway.url}/v1/tasks?pipeline=tabulated&limit=100`, {
            headers: { authorization: `Bearer ${TOKENS.admin}` },
          }).then((r) => r.json())) as { tasks: unknown[] }
        ).tasks.length;
      const before = await tabulatedTasks();
      const second = await client.callTool({ name: 'tabulated', arguments: { goal: 'count' } });
      expect(second.isError).toBe(true);
      expect(second.content[0]).toMatchObject({ type: 'text', text: expect.stringContaining('consumers') });
      // The refused call started no task: a client that retries once a slot is free runs it once.
      expect(await tabulatedTasks()).toBe(before);
      stop.abort('done');
      expect((await h.finalOf(submittedTask(progress) as string, 20_000)).kind).toBe('task.cancelled');
      // The slot is given back when the call ends.
      const third = await client.callTool({ name: 'tabulated', arguments: { goal: 'count' } });
      expect(third.isError).toBeFalsy();
      await client.close();
    } finally {
      await capped.close();
    }
  });

  it('a read-only token gets no pipeline tools, and a request without a token is refused', async () => {
    const { tools } = await (await connect('reader', 'legacy')).listTools();
    expect(tools.map((t) => t.name)).toEqual(['troupe_get']);
    const anonymous = new Client({ name: 'nobody', version: '1' });
    await expect(
      anonymous.connect(new StreamableHTTPClientTransport(new URL(`${gateway.url}/mcp`))),
    ).rejects.toThrow(/401|no bearer token/);
  });

  it('starts a long task with troupe_start and reads its state and result with troupe_get', async () => {
    const client = await connect('admin', 'auto');
    const started = await client.callTool({
      name: 'troupe_start',
      arguments: { pipeline: 'tabulated', goal: 'count the words' },
    });
    expect(started.isError).toBeFalsy();
    const state = started.structuredContent as { taskId: string; status: string };
    expect(['submitted', 'running', 'completed']).toContain(state.status);
    const got = await client.callTool({
      name: 'troupe_get',
      arguments: { taskId: state.taskId, waitSeconds: 30 },
    });
    expect(got.structuredContent).toMatchObject({
      taskId: state.taskId,
      pipeline: 'tabulated',
      status: 'completed',
      output: '{"words": 3, "summary": "three words"}',
      waitingFor: [],
      trace: `troupe://tasks/${state.taskId}/trace`,
    });
  });

  it('troupe_get names the approval a task waits on, and how to settle it; troupe_cancel stops it', async () => {
    const client = await connect('admin', 'legacy');
    const started = await client.callTool({
      name: 'troupe_start',
      arguments: { pipeline: 'gated', goal: 'ship' },
    });
    const { taskId } = started.structuredContent as { taskId: string };
    const waiting = await vi.waitFor(
      async () => {
        const got = await client.callTool({ name: 'troupe_get', arguments: { taskId } });
        const state = got.structuredContent as { waitingFor: { id: string; kind: string; how: string }[] };
        expect(state.waitingFor).toHaveLength(1);
        return state.waitingFor;
      },
      { timeout: 20_000, interval: 100 },
    );
    expect(waiting).toMatchObject([{ kind: 'approval' }]);
    expect(waiting[0]?.how).toContain(`troupe approve ${waiting[0]?.id}`);
    // troupe_cancel stops it, with the reason given.
    const cancelled = await client.callTool({
      name: 'troupe_cancel',
      arguments: { taskId, reason: 'not this one' },
    });
    expect(cancelled.isError).toBeFalsy();
    const final = await h.finalOf(taskId, 20_000);
    expect(final.kind === 'task.cancelled' ? final.data.reason : final.kind).toContain('not this one');
    const after = await client.callTool({ name: 'troupe_get', arguments: { taskId } });
    expect(after.structuredContent).toMatchObject({ status: 'cancelled', waitingFor: [] });
  });

  it('troupe_tell tells the agent at work in a running task, for a token that may approve', async () => {
    const client = await connect('admin', 'auto');
    const started = await client.callTool({
      name: 'troupe_start',
      arguments: { pipeline: 'slowpoke', goal: 'take your time' },
    });
    const { taskId } = started.structuredContent as { taskId: string };
    await vi.waitFor(() => expect(ofKind(h.eventsOf(taskId), 'llm.request')).not.toHaveLength(0), {
      timeout: 20_000,
      interval: 100,
    });
    const tell = {
      name: 'troupe_tell',
      arguments: { taskId, text: 'use the v2 API, not v1', idempotencyKey: 'k1' },
    };
    const told = await client.callTool(tell);
    expect(told.isError).toBeFalsy();
    expect(told.structuredContent).toEqual({ taskId, messageId: expect.any(String) });
    // Called again with its idempotencyKey (its answer lost, say): the same message, told once.
    expect((await client.callTool(tell)).structuredContent).toEqual(told.structuredContent);
    await vi.waitFor(() => expect(ofKind(h.eventsOf(taskId), 'task.told')).toHaveLength(1), {
      timeout: 10_000,
    });
    expect(ofKind(h.eventsOf(taskId), 'task.told')[0]?.data).toMatchObject({
      messageId: (told.structuredContent as { messageId: string }).messageId,
      text: 'use the v2 API, not v1',
      by: expect.stringMatching(/^MCP client .* \(token ops\)$/),
    });
    // A token that may only submit is not offered it.
    const { tools } = await (await connect('submitter', 'auto')).listTools();
    expect(tools.map((t) => t.name)).not.toContain('troupe_tell');
    await client.callTool({ name: 'troupe_cancel', arguments: { taskId } });
    await h.finalOf(taskId, 20_000);
    const late = await client.callTool({ name: 'troupe_tell', arguments: { taskId, text: 'too late' } });
    expect(late.isError).toBe(true);
    expect(JSON.stringify(late.content)).toContain('already cancelled; nothing to tell');
    expect(ofKind(h.eventsOf(taskId), 'task.told')).toHaveLength(1);
  });

  it('troupe_pause and troupe_resume hold and let go a running task, and say why when refused', async () => {
    const client = await connect('admin', 'auto');
    const started = await client.callTool({
      name: 'troupe_start',
      arguments: { pipeline: 'slowpoke', goal: 'take your time' },
    });
    const { taskId } = started.structuredContent as { taskId: string };
    await vi.waitFor(() => expect(ofKind(h.eventsOf(taskId), 'llm.request')).not.toHaveLength(0), {
      timeout: 20_000,
      interval: 100,
    });
    const pause = { name: 'troupe_pause', arguments: { taskId, reason: 'checking the plan' } };
    const paused = await client.callTool(pause);
    expect(paused.isError).toBeFalsy();
    expect(paused.structuredContent).toEqual({ taskId, status: 'paused' });
    expect(
      (await client.callTool({ name: 'troupe_get', arguments: { taskId } })).structuredContent,
    ).toMatchObject({
      status: 'running',
      paused: { reason: 'checking the plan', by: expect.stringMatching(/^MCP client .* \(token ops\)$/) },
    });
    // Paused again: refused, with what that means for the caller, and nothing changed.
    const again = await client.callTool(pause);
    expect(again.isError).toBe(true);
    expect(JSON.stringify(again.content)).toMatch(/refused \(conflict: nothing was changed.*paused already/);
    // A token that may approve only another pipeline's tasks does not see this one.
    const elsewhere = await (await connect('tabulatedOnly', 'auto')).callTool({
      name: 'troupe_resume',
      arguments: { taskId },
    });
    expect(elsewhere.isError).toBe(true);
    expect(JSON.stringify(elsewhere.content)).toContain('refused (not_found');
    const resumed = await client.callTool({ name: 'troupe_resume', arguments: { taskId } });
    expect(resumed.structuredContent).toEqual({ taskId, status: 'running' });
    await vi.waitFor(() => expect(ofKind(h.eventsOf(taskId), 'task.resumed')).toHaveLength(1), {
      timeout: 10_000,
    });
    expect(ofKind(h.eventsOf(taskId), 'task.resumed')[0]?.data).toMatchObject({ after: 'pause' });
    const notPaused = await client.callTool({ name: 'troupe_resume', arguments: { taskId } });
    expect(JSON.stringify(notPaused.content)).toContain('not paused');
    // A token that may only read is offered neither.
    const { tools } = await (await connect('reader', 'auto')).listTools();
    expect(tools.map((t) => t.name)).not.toContain('troupe_pause');
    await client.callTool({ name: 'troupe_cancel', arguments: { taskId } });
    await h.finalOf(taskId, 20_000);

    // The ended task runs again from its step as a new task, once per idempotencyKey, and forks with a new input.
    const restart = { name: 'troupe_restart', arguments: { taskId, from: 'plan', idempotencyKey: 'r1' } };
    const restarted = await client.callTool(restart);
    expect(restarted.isError).toBeFalsy();
    const made = restarted.structuredContent as { taskId: string };
    expect(made).toEqual({ taskId: expect.any(String), origin: { taskId, kind: 'restart', step: 'plan' } });
    expect((await client.callTool(restart)).structuredContent).toEqual(made);
    const forked = await client.callTool({
      name: 'troupe_fork',
      arguments: { taskId, at: 'plan', input: { note: 'shorter' } },
    });
    const fork = forked.structuredContent as { taskId: string };
    expect(fork.taskId).not.toBe(made.taskId);
    const unknownStep = await client.callTool({ name: 'troupe_fork', arguments: { taskId, at: 'ship' } });
    expect(unknownStep.isError).toBe(true);
    expect(JSON.stringify(unknownStep.content)).toContain('refused (invalid_request');
    for (const id of [made.taskId, fork.taskId]) {
      await vi.waitFor(async () => expect((await readTask(h.bus, id)).origin).toMatchObject({ taskId }), {
        timeout: 20_000,
        interval: 100,
      });
      await client.callTool({ name: 'troupe_cancel', arguments: { taskId: id } });
      await h.finalOf(id, 20_000);
    }
    expect((await readTask(h.bus, fork.taskId)).origin).toMatchObject({ kind: 'fork', edited: ['input'] });
  });

  it('runs examples/mcpClient.ts, as docs/interop.md shows it', async () => {
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [
        '--import',
        'tsx',
        join(repoRoot, 'examples', 'mcpClient.ts'),
        `${gateway.url}/mcp`,
        'tabulated',
        'count these words',
      ],
      { cwd: repoRoot, env: { ...process.env, TROUPE_TOKEN: TOKENS.admin }, timeout: 60_000 },
    );
    const lines = stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^tools: .*tabulated/);
    expect(lines).toContain('progress: step count started (agent counter)');
    expect(lines.slice(-2)).toEqual([
      '{"words": 3, "summary": "three words"}',
      'structured: {"words":3,"summary":"three words"}',
    ]);
  }, 90_000);

  it("offers each task's trace and output as resources", async () => {
    const client = await connect('admin', 'legacy');
    const { resourceTemplates } = await client.listResourceTemplates();
    expect(resourceTemplates.map((t) => t.uriTemplate).sort()).toEqual([
      'troupe://tasks/{taskId}/output',
      'troupe://tasks/{taskId}/trace',
    ]);
    const result = await client.callTool({ name: 'tabulated', arguments: { goal: 'count' } });
    const taskId = result._meta?.['troupe/taskId'] as string;
    const trace = await client.readResource({ uri: `troupe://tasks/${taskId}/trace` });
    const body = JSON.parse((trace.contents[0] as { text: string }).text);
    expect(body).toMatchObject({
      taskId,
      steps: [expect.objectContaining({ step: 'count', agent: 'counter' })],
    });
    const output = await client.readResource({ uri: `troupe://tasks/${taskId}/output` });
    expect(output.contents[0]).toMatchObject({
      uri: `troupe://tasks/${taskId}/output`,
      mimeType: 'text/plain',
      text: '{"words": 3, "summary": "three words"}',
    });
    const { resources } = await client.listResources();
    expect(resources.map((r) => r.uri)).toContain(`troupe://tasks/${taskId}/trace`);
    await expect(client.readResource({ uri: 'troupe://tasks/t-none/trace' })).rejects.toThrow();
  });
});
