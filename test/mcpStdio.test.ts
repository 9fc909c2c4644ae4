import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { listHumanRequests, readTask, replyToHuman } from '@troupe/client';
import { builtinTools, type Coordinator, loadPipeline, startCoordinator } from '@troupe/coordinator';
import { createLogger, NatsBus } from '@troupe/runtime';
import { startTestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { cliEnv } from './support/cli.ts';
import {
  fixturePath,
  type Harness,
  ofKind,
  repoRoot,
  startHarness,
  startSecondCoordinator,
} from './support/harness.ts';

const bin = join(repoRoot, 'apps', 'cli', 'bin', 'troupe.mjs');

type ElicitAnswer = {
  action: 'accept' | 'decline' | 'cancel';
  content?: Record<string, string | number | boolean | string[]>;
};

describe('troupe mcp: pipelines as tools over stdio, for hosts that start a command', () => {
  let h: Harness;
  const clients: Client[] = [];

  beforeAll(async () => {
    h = await startHarness([
      fixturePath('tabulated.yaml'),
      fixturePath('gated.yaml'),
      fixturePath('slowpoke.yaml'),
    ]);
  });
  afterAll(async () => {
    for (const client of clients) await client.close().catch(() => undefined);
    await h?.stop();
  });

  /**
   * The official client, starting the built `troupe mcp` as a host does. Anything on the child's stdout that is not
   * an MCP message would reach `errors`.
   */
  async function connect(
    mode: 'legacy' | 'auto',
    elicit?: () => ElicitAnswer,
    args: string[] = [],
  ): Promise<{ client: Client; errors: Error[]; stderr: string[] }> {
    const client = new Client(
      { name: `host-${mode}`, version: '1.0.0' },
      { capabilities: elicit ? { elicitation: { form: {} } } : {}, versionNegotiation: { mode } },
    );
    if (elicit) client.setRequestHandler('elicitation/create', async () => elicit());
    const errors: Error[] = [];
    const stderr: string[] = [];
    client.onerror = (error) => void errors.push(error);
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [bin, 'mcp', '--server', h.nats.url, ...args],
      env: cliEnv() as Record<string, string>,
      cwd: repoRoot,
      stderr: 'pipe',
    });
    transport.stderr?.on('data', (chunk: Buffer) => void stderr.push(chunk.toString()));
    await client.connect(transport);
    clients.push(client);
    return { client, errors, stderr };
  }

  it('lists the pipelines as tools and runs one to its structured output (2025-11-25)', async () => {
    const { client, errors, stderr } = await connect('legacy');
    expect(client.getProtocolEra()).toBe('legacy');
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual([
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
    const progress: string[] = [];
    const result = await client.callTool(
      { name: 'tabulated', arguments: { goal: 'count these words' } },
      { onprogress: (p) => void progress.push(p.message ?? '') },
    );
    expect(result.structuredContent).toEqual({ words: 3, summary: 'three words' });
    expect(progress).toContain('step count started (agent counter)');
    // Its log line went to stderr; stdout held MCP messages only.
    expect(stderr.join('')).toContain('troupe mcp: serving MCP on stdio as ');
    expect(errors).toEqual([]);
  });

  it('asks for an approval through elicitation and records the decision as the host user (2026-07-28)', async () => {
    const { client, errors } = await connect(
      'auto',
      () => ({ action: 'accept', content: { decision: 'allow' } }),
      ['--by', 'ana'],
    );
    expect(client.getProtocolEra()).toBe('modern');
    const result = await client.callTool({ name: 'gated', arguments: { goal: 'ship the release' } });
    expect(result.isError).toBeFalsy();
    const taskId = result._meta?.['troupe/taskId'] as string;
    const decided = ofKind(h.eventsOf(taskId), 'approval.decided');
    expect(decided.map((e) => [e.data.decision, e.data.by])).toEqual([
      ['allow', 'host-auto (MCP) (token ana)'],
    ]);
    expect(errors).toEqual([]);
  });

  it('declines through elicitation on 2025-11-25: the approval is denied with the reason', async () => {
    const { client } = await connect('legacy', () => ({ action: 'cancel' }));
    const result = await client.callTool({ name: 'gated', arguments: { goal: 'ship the release' } });
    const taskId = result._meta?.['troupe/taskId'] as string;
    const decided = ofKind(h.eventsOf(taskId), 'approval.decided');
    expect(decided.map((e) => [e.data.decision, e.data.reason])).toEqual([
      ['deny', 'the user cancelled it in host-legacy (MCP)'],
    ]);
  });

  it('leaves the task of a call under way running when the host goes: it is durable, and ends when decided', async () => {
    const { client } = await connect('legacy');
    let taskId: string | undefined;
    const asked = new Promise<void>((resolve) => {
      void client
        .callTool(
          { name: 'gated', arguments: { goal: 'release v9' } },
          {
            onprogress: (p) => {
              taskId ??= /^task (\S+) submitted/.exec(p.message ?? '')?.[1];
              if (p.message?.includes('troupe approve')) resolve();
            },
          },
        )
        .catch(() => undefined);
    });
    await asked;
    // The host quits: stdin closes and `troupe mcp` exits, ending the call.
    await client.close();
    const [request] = await listHumanRequests(h.bus, { taskId: taskId as string });
    expect(request?.status).toBe('pending');
    await replyToHuman(h.bus, request?.id ?? '', {
      kind: 'approval',
      decision: { decision: 'allow', by: 'ops' },
    });
    expect((await h.finalOf(taskId as string, 20_000)).kind).toBe('task.completed');
  });

  for (const mode of ['legacy', 'auto'] as const) {
    it(`cancels the task when the host cancels the call (${mode})`, async () => {
      const { client } = await connect(mode);
      const stop = new AbortController();
      let taskId: string | undefined;
      const call = client.callTool(
        { name: 'slowpoke', arguments: { goal: 'think' } },
        {
          signal: stop.signal,
          onprogress: (p) => {
            taskId ??= /^task (\S+) submitted/.exec(p.message ?? '')?.[1];
            if (p.message?.startsWith('step plan started')) stop.abort('stopped by the user');
          },
        },
      );
      await expect(call).rejects.toThrow(/stopped by the user/);
      expect(taskId).toBeDefined();
      expect((await h.finalOf(taskId as string, 20_000)).kind).toBe('task.cancelled');
      expect((await readTask(h.bus, taskId as string)).status).toBe('cancelled');
    });
  }

  it('a pipeline loaded after the host connected becomes a tool, and the host is told its list changed', async () => {
    const { client } = await connect('legacy');
    let changed = 0;
    client.setNotificationHandler('notifications/tools/list_changed', () => void changed++);
    expect((await client.listTools()).tools.map((t) => t.name)).not.toContain('confirming');
    const second = await startSecondCoordinator(h, ['confirming.yaml']);
    try {
      await vi.waitFor(() => expect(changed).toBeGreaterThan(0), { timeout: 20_000, interval: 100 });
      expect((await client.listTools()).tools.map((t) => t.name)).toContain('confirming');
    } finally {
      await second.stop();
    }
  });

  it('started before any coordinator, it says so on stderr and gets its tools once one runs', async () => {
    const nats = await startTestNats();
    const workspaceRoot = await mkdtemp(join(tmpdir(), 'troupe-mcp-ws-'));
    const client = new Client({ name: 'early-host', version: '1' });
    const stderr: string[] = [];
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [bin, 'mcp', '--server', nats.url],
      env: cliEnv() as Record<string, string>,
      cwd: repoRoot,
      stderr: 'pipe',
    });
    transport.stderr?.on('data', (chunk: Buffer) => void stderr.push(chunk.toString()));
    let coordinator: Coordinator | undefined;
    let bus: NatsBus | undefined;
    try {
      await client.connect(transport);
      expect((await client.listTools()).tools.map((t) => t.name).sort()).toEqual([
        'troupe_cancel',
        'troupe_fork',
        'troupe_get',
        'troupe_pause',
        'troupe_restart',
        'troupe_resume',
        'troupe_tell',
      ]);
      await vi.waitFor(() => expect(stderr.join('')).toContain('cannot read the pipelines'), {
        timeout: 20_000,
      });
      const logger = createLogger({ level: 'silent' });
      bus = await NatsBus.connect({ servers: nats.url, name: 'late-coordinator', logger });
      const registry = builtinTools();
      coordinator = await startCoordinator({
        bus,
        pipelines: [await loadPipeline(fixturePath('tabulated.yaml'), { toolNames: registry.names() })],
        logger,
        workspaceRoot,
        registry,
      });
      await vi.waitFor(
        async () => expect((await client.listTools()).tools.map((t) => t.name)).toContain('tabulated'),
        { timeout: 20_000, interval: 200 },
      );
      const result = await client.callTool({ name: 'tabulated', arguments: { goal: 'count' } });
      expect(result.structuredContent).toEqual({ words: 3, summary: 'three words' });
    } finally {
      await client.close().catch(() => undefined);
      await coordinator?.stop();
      await bus?.close();
      await nats.stop();
      await rm(workspaceRoot, { recursive: true, force: true });
    }
  });

  it('--pipeline limits the tools to the pipelines named', async () => {
    const { client } = await connect('legacy', undefined, ['--pipeline', 'tabulated']);
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
  });
});
