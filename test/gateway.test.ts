import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EventSchemas } from '@ag-ui/core/schemas';
import { type Gateway, hashToken, startGateway, TokenStore } from '@troupe/gateway';
import { TroupeEvent } from '@troupe/protocol';
import { createLogger, jetstreamManagerOf } from '@troupe/runtime';
import { type FakeModelServer, startFakeOpenAI } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  examplePath,
  fixturePath,
  type Harness,
  kinds,
  ofKind,
  startHarness,
  waitUntil,
} from './support/harness.ts';
import { readSse, type SseMessage } from './support/sse.ts';
import { openWs } from './support/ws.ts';

const TOKENS = {
  admin: 'admin-token-0123456789abcdef',
  reader: 'reader-token-0123456789abcdef',
  demoOnly: 'demo-submit-token-0123456789ab',
  approver: 'approver-token-0123456789abcd',
};

describe('the gateway: Troupe over HTTP', () => {
  let h: Harness;
  let gateway: Gateway;
  /** The model of `chronicle`'s session summarizer. */
  let historian: FakeModelServer;
  let dir: string;
  const logLines: string[] = [];

  beforeAll(async () => {
    historian = await startFakeOpenAI();
    dir = await mkdtemp(join(tmpdir(), 'troupe-gateway-'));
    await writeChronicle(dir, historian.baseURL);
    h = await startHarness(
      [
        examplePath('demo.yaml'),
        fixturePath('gated.yaml'),
        fixturePath('slowpoke.yaml'),
        join(dir, 'chronicle.yaml'),
      ],
      // Each event alone (batching off), so a stream resumed after any event carries exactly the rest; with batching,
      // one resumed half-way through a batch gets the whole batch again (packages/client/test/batchedEvents.test.ts),
      // and test/eventBatches.test.ts reads the gateway's streams of batched events.
      { env: { ...process.env, HISTORIAN_KEY: 'sk-test-historian' }, eventBatch: false },
    );
    const tokens = new TokenStore([
      { name: 'ops', sha256: hashToken(TOKENS.admin), scopes: ['admin'] },
      { name: 'watcher', sha256: hashToken(TOKENS.reader), scopes: ['read'] },
      { name: 'ci', sha256: hashToken(TOKENS.demoOnly), scopes: ['submit'], pipelines: ['demo'] },
      { name: 'ana', sha256: hashToken(TOKENS.approver), scopes: ['approve'] },
    ]);
    gateway = await startGateway({
      bus: h.bus,
      logger: createLogger({
        level: 'info',
        destination: { write: (line: string) => void logLines.push(line) },
      }),
      tokens,
      port: 0,
    });
  });
  afterAll(async () => {
    await gateway?.close();
    await h?.stop();
    await historian?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const call = async (
    method: string,
    path: string,
    options: { token?: keyof typeof TOKENS | null; body?: unknown; headers?: Record<string, string> } = {},
  ) => {
    const token = options.token === undefined ? 'admin' : options.token;
    const response = await fetch(`${gateway.url}${path}`, {
      method,
      headers: {
        ...(token ? { authorization: `Bearer ${TOKENS[token]}` } : {}),
        ...(options.body === undefined ? {} : { 'content-type': 'application/json' }),
        ...options.headers,
      },
      ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
    });
    const text = await response.text();
    return { status: response.status, headers: response.headers, body: text ? JSON.parse(text) : undefined };
  };
  const events = (taskId: string, query = '', headers: Record<string, string> = {}, stopAfter?: number) =>
    readSse(`${gateway.url}/v1/tasks/${taskId}/events${query}`, {
      headers: { authorization: `Bearer ${TOKENS.admin}`, ...headers },
      ...(stopAfter === undefined ? {} : { stopAfter }),
    });
  const eventOf = (message: SseMessage) => TroupeEvent.parse(JSON.parse(message.data));

  it('refuses a request without a token, with an unknown one, or beyond its scope and pipelines, saying why', async () => {
    const none = await call('GET', '/v1/tasks', { token: null });
    expect(none).toMatchObject({ status: 401, body: { error: { code: 'unauthenticated' } } });
    const unknown = await call('GET', '/v1/tasks', {
      headers: { authorization: 'Bearer not-a-known-token' },
      token: null,
    });
    expect(unknown).toMatchObject({
      status: 401,
      body: { error: { code: 'unauthenticated', message: 'unknown token' } },
    });
    const reader = await call('POST', '/v1/pipelines/demo/tasks', { token: 'reader', body: { goal: 'x' } });
    expect(reader.status).toBe(403);
    expect(reader.body.error).toMatchObject({ code: 'forbidden' });
    expect(reader.body.error.message).toContain('token watcher lacks the submit scope');
    const elsewhere = await call('POST', '/v1/pipelines/gated/tasks', {
      token: 'demoOnly',
      body: { goal: 'x' },
    });
    expect(elsewhere.status).toBe(403);
    expect(elsewhere.body.error.message).toContain('may not touch pipeline gated');
    // Each refusal is a log line naming why.
    expect(logLines.some((l) => l.includes('token watcher lacks the submit scope'))).toBe(true);
    expect(logLines.some((l) => l.includes('unknown token'))).toBe(true);
  });

  it('rejects a malformed task with a 400 naming the field, and an unknown pipeline with a 404', async () => {
    const empty = await call('POST', '/v1/pipelines/demo/tasks', { body: { goal: '' } });
    expect(empty.status).toBe(400);
    expect(empty.body.error.code).toBe('invalid_request');
    expect(empty.body.error.issues).toEqual([expect.objectContaining({ path: 'body.goal' })]);
    const extra = await call('POST', '/v1/pipelines/demo/tasks', { body: { goal: 'x', colour: 'red' } });
    expect(extra.status).toBe(400);
    const unknown = await call('POST', '/v1/pipelines/nope/tasks', { body: { goal: 'x' } });
    expect(unknown).toMatchObject({ status: 404, body: { error: { code: 'not_found' } } });
    expect(unknown.body.error.message).toContain('no coordinator has loaded a pipeline named "nope"');
  });

  it('takes a goal and answers with the result in one call, with the reviewer’s reject and rework in its steps', async () => {
    const done = await call('POST', '/v1/pipelines/demo/tasks?wait=60', {
      body: { goal: 'Write a short hello note', id: 'gw-wait-1' },
    });
    expect(done.status).toBe(200);
    expect(done.headers.get('location')).toBe('/v1/tasks/gw-wait-1');
    expect(done.body).toMatchObject({ taskId: 'gw-wait-1', pipeline: 'demo', status: 'completed', round: 2 });
    expect(done.body.output).toBeTruthy();
    expect(done.body.usage.modelCalls).toBeGreaterThan(0);
    // The pipeline version it ran on, as its record says.
    expect(done.body.version).toMatch(/^[0-9a-f]{64}$/);

    const task = await call('GET', '/v1/tasks/gw-wait-1?steps=true', { token: 'reader' });
    expect(task.status).toBe(200);
    expect(task.body.steps.map((s: { step: string; verdict?: string }) => [s.step, s.verdict])).toEqual([
      ['plan', undefined],
      ['execute', undefined],
      ['review', 'reject'],
      ['execute', undefined],
      ['review', 'approve'],
    ]);
    // The same id again runs nothing, and says so.
    const again = await call('POST', '/v1/pipelines/demo/tasks', {
      body: { goal: 'Write it again', id: 'gw-wait-1' },
    });
    expect(again).toMatchObject({
      status: 200,
      body: { taskId: 'gw-wait-1', duplicate: true, status: 'completed' },
    });
  });

  it('makes one task of one Idempotency-Key, and answers 202 at once without a wait', async () => {
    const headers = { 'idempotency-key': 'order #42 / retry-safe' };
    const first = await call('POST', '/v1/pipelines/demo/tasks', {
      token: 'demoOnly',
      body: { goal: 'hello' },
      headers,
    });
    expect(first.status).toBe(202);
    expect(first.body.status).toBe('submitted');
    const second = await call('POST', '/v1/pipelines/demo/tasks', {
      token: 'demoOnly',
      body: { goal: 'hello' },
      headers,
    });
    expect(second.body).toMatchObject({ taskId: first.body.taskId, duplicate: true });
    await h.finalOf(first.body.taskId);
    expect(ofKind(h.events, 'task.accepted').filter((e) => e.taskId === first.body.taskId)).toHaveLength(1);
  });

  it('lists tasks newest first, filtered, a page at a time', async () => {
    for (const id of ['gw-list-1', 'gw-list-2', 'gw-list-3']) {
      await call('POST', '/v1/pipelines/demo/tasks?wait=60', { body: { goal: 'list me', id } });
    }
    const seen: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await call(
        'GET',
        `/v1/tasks?pipeline=demo&status=completed&limit=2${cursor ? `&cursor=${cursor}` : ''}`,
        { token: 'reader' },
      );
      expect(page.status).toBe(200);
      expect(page.body.tasks.length).toBeLessThanOrEqual(2);
      seen.push(...page.body.tasks.map((t: { taskId: string }) => t.taskId));
      cursor = page.body.next;
    } while (cursor);
    expect(new Set(seen).size).toBe(seen.length);
    expect(seen.indexOf('gw-list-3')).toBeLessThan(seen.indexOf('gw-list-1'));
    expect(seen).toEqual(expect.arrayContaining(['gw-list-1', 'gw-list-2', 'gw-list-3', 'gw-wait-1']));
    // A token limited to other pipelines sees none of theirs.
    const gatedOnly = await call('GET', '/v1/tasks?pipeline=gated', { token: 'demoOnly' });
    expect(gatedOnly.status).toBe(403);
    expect((await call('GET', '/v1/tasks?cursor=garbage')).status).toBe(400);
  });

  it('streams a task’s events, history then live, and a client that drops resumes with no loss or repeat', async () => {
    const submitted = await call('POST', '/v1/pipelines/demo/tasks', {
      body: { goal: 'stream me', id: 'gw-sse-1' },
    });
    expect(submitted.status).toBe(202);
    // A client that connects at once and drops after 5 messages…
    const cut = await events('gw-sse-1', '', {}, 5);
    expect(cut.ended).toBe(false);
    expect(cut.messages).toHaveLength(5);
    const lastId = cut.messages.at(-1)?.id ?? '';
    // …reconnects with Last-Event-ID, as EventSource does, and gets the rest.
    const rest = await events('gw-sse-1', '', { 'last-event-id': lastId });
    expect(rest.ended).toBe(true);
    const whole = await events('gw-sse-1');
    const ids = (messages: SseMessage[]) => messages.map((m) => Number(m.id));
    expect([...ids(cut.messages), ...ids(rest.messages)]).toEqual(ids(whole.messages));
    expect(ids(whole.messages)).toEqual([...ids(whole.messages)].sort((a, b) => a - b));
    const kindsSeen = whole.messages.map((m) => eventOf(m).kind);
    expect(kindsSeen[0]).toBe('task.accepted');
    expect(kindsSeen.at(-1)).toBe('task.completed');
    expect(whole.messages.map((m) => m.event)).toEqual(kindsSeen);
    // The same through ?after= for clients that cannot set headers.
    const after = await events('gw-sse-1', `?after=${lastId}`);
    expect(ids(after.messages)).toEqual(ids(rest.messages));
    // Everything the harness saw published, each once.
    expect(new Set(whole.messages.map((m) => eventOf(m).id))).toEqual(
      new Set(h.eventsOf('gw-sse-1').map((e) => e.id)),
    );
  });

  it('tells a browser reconnecting after a task’s last event that nothing more will come (204)', async () => {
    const whole = await events('gw-sse-1');
    const last = whole.messages.at(-1)?.id ?? '';
    const again = await fetch(`${gateway.url}/v1/tasks/gw-sse-1/events`, {
      headers: { authorization: `Bearer ${TOKENS.admin}`, 'last-event-id': last },
    });
    expect(again.status).toBe(204);
    // Last-Event-ID wins over the ?after= of the URL an EventSource keeps reconnecting to.
    const third = whole.messages[2]?.id ?? '';
    const resumed = await events('gw-sse-1', '?after=0', { 'last-event-id': third });
    expect(resumed.messages.map((m) => m.id)).toEqual(whole.messages.slice(3).map((m) => m.id));
  });

  it('removes a client’s consumer from NATS when it goes, however early', async () => {
    const jsm = await jetstreamManagerOf(h.bus);
    const consumers = async () => {
      let n = 0;
      for await (const _ of jsm.consumers.list('EVENTS')) n++;
      return n;
    };
    const before = await consumers();
    await call('POST', '/v1/pipelines/slowpoke/tasks', {
      body: { goal: 'take your time', id: 'gw-leave-1' },
    });
    // Until a coordinator takes it, the task has no record and its event stream is a 404.
    await expect.poll(async () => (await call('GET', '/v1/tasks/gw-leave-1')).status).toBe(200);
    const cut = await events('gw-leave-1', '', {}, 1);
    expect(cut.ended).toBe(false);
    const ws = await openWs(`${gateway.url.replace('http', 'ws')}/v1/ws?access_token=${TOKENS.admin}`);
    ws.send({ type: 'subscribe', id: 'x', taskId: 'gw-leave-1' });
    await ws.next((m) => m.type === 'event');
    ws.close();
    await expect.poll(consumers, { timeout: 20_000 }).toBe(before);
    await call('POST', '/v1/tasks/gw-leave-1/cancel', { body: {} });
  });

  it('streams the flow as AG-UI events that the official schemas accept', async () => {
    await call('POST', '/v1/pipelines/demo/tasks?wait=60', { body: { goal: 'agui', id: 'gw-agui-1' } });
    const read = await events('gw-agui-1', '?format=ag-ui');
    expect(read.ended).toBe(true);
    const agui = read.messages.map((m) => EventSchemas.parse(JSON.parse(m.data)));
    const types = agui.map((e) => e.type);
    expect(types[0]).toBe('RUN_STARTED');
    expect(types.at(-1)).toBe('RUN_FINISHED');
    expect(types.filter((t) => t === 'STEP_STARTED')).toHaveLength(5);
    expect(types.filter((t) => t === 'STEP_FINISHED')).toHaveLength(5);
    expect(types).toEqual(
      expect.arrayContaining(['TEXT_MESSAGE_START', 'TEXT_MESSAGE_CONTENT', 'TEXT_MESSAGE_END']),
    );
    expect(types).toEqual(
      expect.arrayContaining(['TOOL_CALL_START', 'TOOL_CALL_ARGS', 'TOOL_CALL_END', 'TOOL_CALL_RESULT']),
    );
    // Every message opened is closed, every tool call ended before its result.
    const opened = agui
      .filter((e) => e.type === 'TEXT_MESSAGE_START')
      .map((e) => (e as { messageId: string }).messageId);
    const closed = agui
      .filter((e) => e.type === 'TEXT_MESSAGE_END')
      .map((e) => (e as { messageId: string }).messageId);
    expect(closed).toEqual(opened);
    // Only the last AG-UI event of each Troupe event carries its stream sequence, so a resume skips none.
    const rawIds = agui.map((e) => (e.rawEvent as { id: string }).id);
    read.messages.forEach((m, i) => {
      expect(m.id === undefined, `message ${i} (${types[i]})`).toBe(rawIds[i + 1] === rawIds[i]);
    });
  });

  it('gives 100 clients on one task the same whole stream', async () => {
    await call('POST', '/v1/pipelines/demo/tasks', { body: { goal: 'crowd', id: 'gw-crowd-1' } });
    const reads = await Promise.all(Array.from({ length: 100 }, () => events('gw-crowd-1')));
    const first = reads[0]?.messages.map((m) => m.id);
    for (const read of reads) {
      expect(read.ended).toBe(true);
      expect(read.messages.map((m) => m.id)).toEqual(first);
    }
    expect(eventOf(reads[0]?.messages.at(-1) as SseMessage).kind).toBe('task.completed');
  }, 120_000);

  it('lists a parked approval, refuses a deny without a reason, and records which token decided', async () => {
    await call('POST', '/v1/pipelines/gated/tasks', { body: { goal: 'release v1', id: 'gw-gate-1' } });
    await waitUntil(() => kinds(h.eventsOf('gw-gate-1')).includes('approval.requested'));
    const pending = await call('GET', '/v1/approvals?taskId=gw-gate-1', { token: 'reader' });
    expect(pending.status).toBe(200);
    const [request] = pending.body.requests;
    expect(request).toMatchObject({
      kind: 'approval',
      status: 'pending',
      tool: 'write_file',
      taskId: 'gw-gate-1',
    });
    // A reader may look, not decide.
    expect(
      (await call('POST', `/v1/approvals/${request.id}`, { token: 'reader', body: { decision: 'allow' } }))
        .status,
    ).toBe(403);
    const noReason = await call('POST', `/v1/approvals/${request.id}`, {
      token: 'approver',
      body: { decision: 'deny' },
    });
    expect(noReason).toMatchObject({ status: 400, body: { error: { code: 'invalid_request' } } });
    const allowed = await call('POST', `/v1/approvals/${request.id}`, {
      token: 'approver',
      body: { decision: 'allow', by: 'Ana Lima' },
    });
    expect(allowed).toMatchObject({
      status: 200,
      body: { id: request.id, outcome: 'allowed', by: 'Ana Lima (token ana)' },
    });
    expect((await h.finalOf('gw-gate-1')).kind).toBe('task.completed');
    expect(ofKind(h.eventsOf('gw-gate-1'), 'approval.decided')[0]?.data).toMatchObject({
      decision: 'allow',
      by: 'Ana Lima (token ana)',
    });
    const twice = await call('POST', `/v1/approvals/${request.id}`, {
      token: 'approver',
      body: { decision: 'deny', reason: 'no' },
    });
    expect(twice.status).toBe(409);
    expect((await call('POST', '/v1/approvals/nope', { body: { decision: 'allow' } })).status).toBe(404);
  });

  it('keeps the tasks of pipelines a token may not touch out of its sight', async () => {
    // A task of the gated pipeline, to a token limited to demo, is as if it did not exist.
    expect((await call('GET', '/v1/tasks/gw-gate-1', { token: 'demoOnly' })).status).toBe(404);
    expect((await call('POST', '/v1/tasks/gw-gate-1/cancel', { token: 'demoOnly', body: {} })).status).toBe(
      404,
    );
    // Its id, submitted to demo, is taken, and nothing of it is shown.
    const taken = await call('POST', '/v1/pipelines/demo/tasks', {
      token: 'demoOnly',
      body: { goal: 'peek', id: 'gw-gate-1' },
    });
    expect(taken).toMatchObject({ status: 409, body: { error: { code: 'conflict' } } });
    expect(JSON.stringify(taken.body)).not.toContain('release v1');
  });

  it('checks the token whatever the spelling of the path', async () => {
    for (const path of ['/%761/tasks', '/v1/%74asks', '/%76%31/approvals']) {
      const response = await call('GET', path, { token: null });
      expect(response.status, path).toBe(401);
    }
  });

  it('sends a deny’s reason to the model', async () => {
    await call('POST', '/v1/pipelines/gated/tasks', { body: { goal: 'release v2', id: 'gw-gate-2' } });
    await waitUntil(() => kinds(h.eventsOf('gw-gate-2')).includes('approval.requested'));
    const [request] = (await call('GET', '/v1/approvals?taskId=gw-gate-2')).body.requests;
    const denied = await call('POST', `/v1/approvals/${request.id}`, {
      token: 'approver',
      body: { decision: 'deny', reason: 'release freeze until Monday' },
    });
    expect(denied.body).toMatchObject({ outcome: 'denied' });
    await h.finalOf('gw-gate-2');
    const result = ofKind(h.eventsOf('gw-gate-2'), 'tool.result').find((r) => r.data.decision !== 'allow');
    expect(result?.data.output).toContain('release freeze until Monday');
  });

  it('cancels a running task once, and says it cannot twice', async () => {
    await call('POST', '/v1/pipelines/slowpoke/tasks', {
      body: { goal: 'take your time', id: 'gw-cancel-1' },
    });
    await waitUntil(() => kinds(h.eventsOf('gw-cancel-1')).includes('llm.request'));
    const cancelled = await call('POST', '/v1/tasks/gw-cancel-1/cancel', {
      body: { reason: 'changed my mind' },
    });
    expect(cancelled).toMatchObject({ status: 200, body: { taskId: 'gw-cancel-1', status: 'cancelled' } });
    expect(await h.finalOf('gw-cancel-1')).toMatchObject({
      kind: 'task.cancelled',
      data: { reason: 'changed my mind (token ops)' },
    });
    const again = await call('POST', '/v1/tasks/gw-cancel-1/cancel', { body: {} });
    expect(again).toMatchObject({ status: 409, body: { error: { code: 'conflict' } } });
    expect((await call('POST', '/v1/tasks/no-such-task/cancel', { body: {} })).status).toBe(404);
    expect((await call('GET', '/v1/tasks/no-such-task')).status).toBe(404);
  });

  it('serves a WebSocket: subscribe, submit, approve, with the same checks, and survives garbage', async () => {
    const ws = await openWs(`${gateway.url.replace('http', 'ws')}/v1/ws?access_token=${TOKENS.admin}`);
    try {
      // Garbage gets an error, and the connection stays open.
      ws.sendRaw('{not json');
      expect(await ws.next((m) => m.type === 'error')).toMatchObject({ error: { code: 'invalid_message' } });
      ws.send({ type: 'launch', id: 'x' });
      expect(await ws.next((m) => m.type === 'error')).toMatchObject({ error: { code: 'invalid_message' } });

      ws.send({ type: 'submit', id: 's1', pipeline: 'gated', task: { goal: 'release v3', id: 'gw-ws-1' } });
      expect(await ws.next((m) => m.id === 's1')).toMatchObject({ ok: true, result: { taskId: 'gw-ws-1' } });
      ws.send({ type: 'subscribe', id: 'f1', taskId: 'gw-ws-1' });
      expect(await ws.next((m) => m.id === 'f1')).toMatchObject({ ok: true, result: { subscribed: true } });
      const asked = await ws.next((m) => m.type === 'event' && m.event.kind === 'approval.requested');
      ws.send({ type: 'deny', id: 'd0', requestId: asked.event.data.approvalId });
      expect(await ws.next((m) => m.type === 'error')).toMatchObject({ error: { code: 'invalid_message' } });
      ws.send({ type: 'approve', id: 'a1', requestId: asked.event.data.approvalId, by: 'Bo' });
      expect(await ws.next((m) => m.id === 'a1')).toMatchObject({
        ok: true,
        result: { outcome: 'allowed', by: 'Bo (token ops)' },
      });
      expect(await ws.next((m) => m.type === 'end' && m.taskId === 'gw-ws-1')).toBeTruthy();
      const seqs = ws.received.filter((m) => m.type === 'event').map((m) => m.seq as number);
      expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
      expect(ws.received.filter((m) => m.type === 'event').at(-1)?.event.kind).toBe('task.completed');
      ws.send({ type: 'subscribe', id: 'f2', taskId: 'no-such-task' });
      expect(await ws.next((m) => m.id === 'f2')).toMatchObject({ ok: false, error: { code: 'not_found' } });
    } finally {
      ws.close();
    }
    // A reader may follow, not submit or approve; no token, no socket.
    const reader = await openWs(`${gateway.url.replace('http', 'ws')}/v1/ws?access_token=${TOKENS.reader}`);
    try {
      reader.send({ type: 'submit', id: 's', pipeline: 'demo', task: { goal: 'x' } });
      expect(await reader.next((m) => m.id === 's')).toMatchObject({
        ok: false,
        error: { code: 'forbidden' },
      });
    } finally {
      reader.close();
    }
    await expect(openWs(`${gateway.url.replace('http', 'ws')}/v1/ws`)).rejects.toThrow(/401/);
  });

  it('runs a session’s follow-up as a task that sees the earlier goals and results', async () => {
    const opened = await call('POST', '/v1/sessions', { body: { pipeline: 'demo', id: 'gw-sess-1' } });
    expect(opened).toMatchObject({ status: 201, body: { id: 'gw-sess-1', pipeline: 'demo', turns: [] } });
    expect((await call('POST', '/v1/sessions', { body: { pipeline: 'demo', id: 'gw-sess-1' } })).status).toBe(
      409,
    );
    const first = await call('POST', '/v1/sessions/gw-sess-1/messages?wait=60', {
      body: { goal: 'Write a short hello note' },
    });
    expect(first).toMatchObject({ status: 200, body: { status: 'completed' } });
    // `<session>-<n>-<random>`: nobody can take a turn's id first.
    const one = first.body.taskId as string;
    expect(one).toMatch(/^gw-sess-1-1-[A-Za-z0-9_-]{6}$/);
    const second = await call('POST', '/v1/sessions/gw-sess-1/messages?wait=60', {
      body: { goal: 'Now also add tests' },
    });
    expect(second).toMatchObject({ status: 200, body: { status: 'completed' } });
    const followUp = second.body.taskId as string;
    expect(followUp).toMatch(/^gw-sess-1-2-/);
    // The follow-up task was given the first goal and its result.
    const accepted = ofKind(h.eventsOf(followUp), 'task.accepted')[0];
    expect(accepted?.data.metadata).toEqual({ session: 'gw-sess-1' });
    expect(accepted?.data.input).toEqual({
      session: {
        id: 'gw-sess-1',
        earlier: [
          { taskId: one, goal: 'Write a short hello note', status: 'completed', result: first.body.output },
        ],
      },
    });
    // In AG-UI form, the session's runs are one thread.
    const agui = await events(followUp, '?format=ag-ui');
    expect(JSON.parse(agui.messages[0]?.data ?? '{}')).toMatchObject({
      type: 'RUN_STARTED',
      threadId: 'gw-sess-1',
      runId: followUp,
    });
    expect((await call('GET', `/v1/tasks/${followUp}`)).body.metadata).toEqual({ session: 'gw-sess-1' });
    const session = await call('GET', '/v1/sessions/gw-sess-1', { token: 'reader' });
    expect(session.body.turns.map((t: { taskId: string; status: string }) => [t.taskId, t.status])).toEqual([
      [one, 'completed'],
      [followUp, 'completed'],
    ]);
    const listed = await call('GET', '/v1/sessions?pipeline=demo', { token: 'reader' });
    expect(listed.body.sessions.map((s: { id: string }) => s.id)).toContain('gw-sess-1');
    expect((await call('GET', '/v1/sessions/nope')).status).toBe(404);
    expect((await call('GET', '/v1/sessions/a*b')).status).toBe(400);
    expect(
      (await call('POST', '/v1/sessions', { token: 'demoOnly', body: { pipeline: 'gated' } })).status,
    ).toBe(403);
  });

  it('folds a session’s older turns into a summary written by the summarizer agent’s model', async () => {
    await call('POST', '/v1/sessions', { body: { pipeline: 'chronicle', id: 'gw-sess-3' } });
    const say = async (n: number) => {
      const said = await call('POST', '/v1/sessions/gw-sess-3/messages?wait=60', {
        body: { goal: `goal ${n}` },
      });
      expect(said).toMatchObject({ status: 200, body: { status: 'completed' } });
      return said.body.taskId as string;
    };
    const sessionOf = (taskId: string) =>
      ofKind(h.eventsOf(taskId), 'task.accepted')[0]?.data.input?.session as {
        summary?: { text: string; turns: number };
        earlier: { goal: string; result: string }[];
      };
    const ids: string[] = [];
    for (let n = 1; n <= 4; n++) ids.push(await say(n));
    // Three earlier turns fit whole: no summary yet, and the summarizer was not asked.
    expect(sessionOf(ids[3] as string).earlier.map((t) => t.goal)).toEqual(['goal 1', 'goal 2', 'goal 3']);
    expect(historian.requests).toHaveLength(0);

    // Turn 1 leaves the last three, but the summarizer's model fails: turn 1 goes condensed instead, and is kept
    // for the next summary.
    historian.enqueue({ kind: 'error', status: 500, message: 'the historian is out' });
    ids.push(await say(5));
    expect(historian.requests).toHaveLength(1);
    expect(sessionOf(ids[4] as string)).not.toHaveProperty('summary');
    expect(sessionOf(ids[4] as string).earlier.map((t) => t.goal)).toEqual([
      'goal 1',
      'goal 2',
      'goal 3',
      'goal 4',
    ]);
    expect(logLines.some((l) => l.includes('could not summarize session gw-sess-3'))).toBe(true);

    // The next message folds turns 1 and 2 in one call.
    historian.enqueue({ kind: 'message', content: 'S1: goals 1 and 2 were done.' });
    ids.push(await say(6));
    const first = JSON.stringify(historian.requests[1]?.body.messages);
    expect(first).toContain('Turn 1 (task');
    expect(first).toContain('Goal: goal 2');
    expect(first).toContain('Result: done');
    expect(first).not.toContain('Summary so far');
    expect(sessionOf(ids[5] as string)).toMatchObject({
      summary: { text: 'S1: goals 1 and 2 were done.', turns: 2 },
    });
    expect(sessionOf(ids[5] as string).earlier.map((t) => t.goal)).toEqual(['goal 3', 'goal 4', 'goal 5']);
    // The call is reported on the follow-up task, like any model call.
    const compacted = ofKind(h.eventsOf(ids[5] as string), 'session.compacted')[0];
    expect(compacted?.data).toMatchObject({ session: 'gw-sess-3', agent: 'historian', turns: 2, folded: 2 });
    expect(compacted?.data.usage.outputTokens).toBeGreaterThan(0);

    // Then the running summary grows by one turn per message, the summary so far given to the model.
    historian.enqueue({ kind: 'message', content: 'S2: goals 1 to 3 were done.' });
    ids.push(await say(7));
    const second = JSON.stringify(historian.requests[2]?.body.messages);
    expect(second).toContain('Summary so far (turns 1–2)');
    expect(second).toContain('S1: goals 1 and 2 were done.');
    expect(second).toContain('Goal: goal 3');
    expect(second).not.toContain('Goal: goal 2');
    expect(sessionOf(ids[6] as string)).toMatchObject({
      summary: { text: 'S2: goals 1 to 3 were done.', turns: 3 },
    });
    const session = await call('GET', '/v1/sessions/gw-sess-3', { token: 'reader' });
    expect(session.body.summary).toMatchObject({
      text: 'S2: goals 1 to 3 were done.',
      turns: 3,
      agent: 'historian',
    });
    expect(session.body.turns).toHaveLength(7);
    // In AG-UI form the run still starts first, the summary's event after it.
    const agui = (await events(ids[6] as string, '?format=ag-ui')).messages.map((m) => JSON.parse(m.data));
    expect(agui[0]).toMatchObject({ type: 'RUN_STARTED', runId: ids[6] });
    expect(agui[1]).toMatchObject({ type: 'CUSTOM', name: 'troupe.session.compacted' });
  });

  it('refuses a follow-up while the session’s last task still runs', async () => {
    await call('POST', '/v1/sessions', { body: { pipeline: 'slowpoke', id: 'gw-sess-2' } });
    const first = await call('POST', '/v1/sessions/gw-sess-2/messages', { body: { goal: 'take your time' } });
    expect(first.status).toBe(202);
    const taskId = first.body.taskId as string;
    const early = await call('POST', '/v1/sessions/gw-sess-2/messages', { body: { goal: 'and then?' } });
    expect(early).toMatchObject({ status: 409, body: { error: { code: 'conflict' } } });
    expect(early.body.error.message).toContain(`${taskId} has not ended yet`);
    // A token limited to another pipeline sees no such session.
    expect((await call('GET', '/v1/sessions/gw-sess-2', { token: 'demoOnly' })).status).toBe(404);
    await call('POST', `/v1/tasks/${taskId}/cancel`, { body: {} });
    await h.finalOf(taskId);
  });

  it('lists the pipelines with their flow as a graph, and streams every task’s events live', async () => {
    const all = await call('GET', '/v1/pipelines', { token: 'reader' });
    const demo = all.body.pipelines.find((p: { name: string }) => p.name === 'demo');
    expect(demo.graph.edges).toEqual(
      expect.arrayContaining([
        { from: 'plan', to: 'execute' },
        { from: 'review', to: 'end', when: 'approve' },
        { from: 'review', to: 'execute', when: 'reject' },
      ]),
    );
    expect(all.body.pipelines.map((p: { name: string }) => p.name).sort()).toEqual([
      'chronicle',
      'demo',
      'gated',
      'slowpoke',
    ]);
    const limited = await call('GET', '/v1/pipelines', { token: 'demoOnly' });
    expect(limited.body.pipelines.map((p: { name: string }) => p.name)).toEqual(['demo']);

    // Live: what is stored from the moment the stream says it is ready, of the pipelines the token may read.
    let ready: () => void = () => {};
    const isReady = new Promise<void>((resolve) => (ready = resolve));
    const live = readSse(`${gateway.url}/v1/events?access_token=${TOKENS.demoOnly}`, {
      stopAfter: 4,
      onMessage: (m) => m.event === 'ready' && ready(),
    });
    await isReady;
    await call('POST', '/v1/pipelines/gated/tasks', { body: { goal: 'not for ci', id: 'gw-live-gated' } });
    await call('POST', '/v1/pipelines/demo/tasks', { body: { goal: 'for ci', id: 'gw-live-demo' } });
    const read = await live;
    const [first, ...rest] = read.messages;
    expect(first?.event).toBe('ready');
    expect(rest.map((m) => eventOf(m).taskId)).toEqual(['gw-live-demo', 'gw-live-demo', 'gw-live-demo']);
  });

  it('answers a body that is not JSON, or too large, with a clear 4xx, and keeps serving', async () => {
    const garbled = await fetch(`${gateway.url}/v1/pipelines/demo/tasks`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKENS.admin}`, 'content-type': 'application/json' },
      body: '{"goal": ',
    });
    expect(garbled.status).toBe(400);
    const body = (await garbled.json()) as { error: { code: string; message: string } };
    expect(body.error).toMatchObject({ code: 'invalid_request', message: expect.stringMatching(/JSON/i) });
    const huge = await fetch(`${gateway.url}/v1/pipelines/demo/tasks`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKENS.admin}`, 'content-type': 'application/json' },
      // Past the most a task's body may be: a 16 MiB input beside a 256 KiB task.
      body: JSON.stringify({ goal: 'g', input: { text: 'x'.repeat(17 * 1024 * 1024) } }),
    });
    expect(huge.status).toBe(413);
    expect(((await huge.json()) as { error: { code: string } }).error.code).toBe('too_large');
    expect((await call('GET', '/healthz', { token: null })).status).toBe(200);
  });

  it('gives a task’s trace as troupe trace --json does', async () => {
    const trace = await call('GET', '/v1/tasks/gw-wait-1/trace', { token: 'reader' });
    expect(trace.status).toBe(200);
    expect(trace.body).toMatchObject({ taskId: 'gw-wait-1', status: 'completed' });
    // The pipeline version it ran on, which only its record names.
    expect(trace.body.version).toMatch(/^[0-9a-f]{64}$/);
    expect(trace.body.steps).toHaveLength(5);
    expect(trace.body.totals.modelCalls).toBeGreaterThan(0);
    expect((await call('GET', '/v1/tasks/gw-wait-1/trace', { token: null })).status).toBe(401);
  });

  it('answers health and readiness, and describes itself in OpenAPI', async () => {
    expect(await call('GET', '/healthz', { token: null })).toMatchObject({
      status: 200,
      body: { ok: true, nats: 'connected', jetstream: 'ok' },
    });
    expect(await call('GET', '/readyz', { token: null })).toMatchObject({
      status: 200,
      body: { streams: 'ok' },
    });
    const openapi = await call('GET', '/openapi.json', { token: null });
    expect(openapi.body.openapi).toMatch(/^3\./);
    expect(Object.keys(openapi.body.paths)).toEqual(
      expect.arrayContaining([
        '/v1/pipelines/{name}/tasks',
        '/v1/tasks',
        '/v1/tasks/{id}',
        '/v1/tasks/{id}/events',
        '/v1/tasks/{id}/cancel',
        '/v1/approvals',
        '/v1/approvals/{id}',
      ]),
    );
    expect(openapi.body.components.schemas).toHaveProperty('SubmitTask');
  });
});

describe('the gateway for browser pages elsewhere (CORS)', () => {
  let h: Harness;
  let gateway: Gateway;

  beforeAll(async () => {
    h = await startHarness([examplePath('demo.yaml')]);
    gateway = await startGateway({
      bus: h.bus,
      logger: createLogger({ level: 'silent' }),
      tokens: new TokenStore([]),
      auth: 'none',
      port: 0,
      corsOrigins: ['https://app.example'],
    });
  });
  afterAll(async () => {
    await gateway?.close();
    await h?.stop();
  });

  it('without tokens, serves this machine only: another Host or a page elsewhere is refused', async () => {
    const { request } = await import('node:http');
    const status = (host: string) =>
      new Promise<number>((resolve, reject) => {
        const url = new URL(`${gateway.url}/v1/tasks`);
        request({ hostname: url.hostname, port: url.port, path: url.pathname, headers: { host } }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        })
          .on('error', reject)
          .end();
      });
    expect(await status('evil.example')).toBe(403);
    expect(await status(`localhost:${new URL(gateway.url).port}`)).toBe(200);
    const wsUrl = `${gateway.url.replace('http', 'ws')}/v1/ws`;
    await expect(openWs(wsUrl, { origin: 'https://evil.example' })).rejects.toThrow(/403/);
    const allowed = await openWs(wsUrl, { origin: 'https://app.example' });
    allowed.close();
  });

  it('without tokens, refuses another Host on the A2A and MCP routes too: 403 in each one’s form, not a 500', async () => {
    const { request } = await import('node:http');
    const answer = (method: string, path: string, body?: string) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const url = new URL(`${gateway.url}${path}`);
        const headers = { host: 'evil.example', 'content-type': 'application/json', accept: '*/*' };
        request({ hostname: url.hostname, port: url.port, path: url.pathname, method, headers }, (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => (text += chunk));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
        })
          .on('error', reject)
          .end(body);
      });
    const rpc = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ListTasks', params: {} });
    const refusals = [
      await answer('GET', '/.well-known/agent-card.json'),
      await answer('GET', '/a2a/demo/.well-known/agent-card.json'),
      await answer('POST', '/a2a/demo/jsonrpc', rpc),
      await answer('POST', '/a2a/jsonrpc', rpc),
      await answer('GET', '/a2a/demo/rest/tasks'),
      await answer('POST', '/mcp', rpc),
    ];
    for (const refusal of refusals) {
      expect(refusal.status).toBe(403);
      expect(refusal.body).toContain('serves 127.0.0.1 only, not host evil.example');
    }
    // Each binding answers it as it answers a token's refusal in a handler: JSON-RPC with Troupe's forbidden code
    // (-32041), HTTP+JSON as google.rpc.Status PERMISSION_DENIED, the cards in the gateway's plain form.
    for (const rpcAnswer of [refusals[2], refusals[3]]) {
      expect(JSON.parse(rpcAnswer?.body ?? '{}')).toMatchObject({
        jsonrpc: '2.0',
        id: null,
        error: { code: -32041 },
      });
    }
    expect(JSON.parse(refusals[4]?.body ?? '{}')).toMatchObject({
      error: { code: 403, status: 'PERMISSION_DENIED' },
    });
    expect(JSON.parse(refusals[0]?.body ?? '{}')).toMatchObject({ error: { code: 'refused' } });
  });

  it('lets the configured origin call, and no other', async () => {
    const preflight = (origin: string) =>
      fetch(`${gateway.url}/v1/pipelines/demo/tasks`, {
        method: 'OPTIONS',
        headers: {
          origin,
          'access-control-request-method': 'POST',
          'access-control-request-headers': 'authorization, content-type',
        },
      });
    const allowed = await preflight('https://app.example');
    expect(allowed.headers.get('access-control-allow-origin')).toBe('https://app.example');
    expect(allowed.headers.get('access-control-allow-headers')).toContain('authorization');
    const other = await preflight('https://evil.example');
    expect(other.headers.get('access-control-allow-origin')).toBeNull();
    const read = await fetch(`${gateway.url}/v1/tasks`, { headers: { origin: 'https://app.example' } });
    expect(read.headers.get('access-control-allow-origin')).toBe('https://app.example');
    // A browser's A2A and MCP clients send their protocols' headers: the preflight lets them.
    const protocols = await fetch(`${gateway.url}/mcp`, {
      method: 'OPTIONS',
      headers: {
        origin: 'https://app.example',
        'access-control-request-method': 'POST',
        'access-control-request-headers':
          'a2a-version, mcp-session-id, mcp-protocol-version, mcp-method, mcp-name',
      },
    });
    const allowedHeaders = protocols.headers.get('access-control-allow-headers') ?? '';
    for (const header of [
      'a2a-version',
      'a2a-extensions',
      'mcp-session-id',
      'mcp-protocol-version',
      'mcp-method',
      'mcp-name',
    ])
      expect(allowedHeaders).toContain(header);
    expect(protocols.headers.get('access-control-expose-headers')).toContain('mcp-session-id');
  });

  it('closes with event streams still open', async () => {
    let opened: () => void = () => {};
    const ready = new Promise<void>((resolve) => (opened = resolve));
    const live = readSse(`${gateway.url}/v1/events`, { onMessage: (m) => m.event === 'ready' && opened() });
    await ready;
    await gateway.close();
    expect((await live).ended).toBe(true);
  });
});

/** A one-step pipeline whose sessions are summarized by `historian`, an agent on a fake OpenAI-compatible server. */
async function writeChronicle(dir: string, baseURL: string): Promise<void> {
  await writeFile(
    join(dir, 'chronicle.yaml'),
    `version: 1
name: chronicle
models:
  scripted: { provider: scripted, script: ./chronicle.script.yaml }
  cheap: { provider: openai-compatible, model: small-1, baseURL: "${baseURL}", apiKeyEnv: HISTORIAN_KEY, maxAttempts: 1 }
defaults: { model: scripted }
agents:
  writer: { instructions: Do what is asked. }
  historian: { model: cheap, instructions: Keep the record. }
sessions: { summarizer: historian }
flow:
  - { id: write, kind: agent, agent: writer }
`,
  );
  await writeFile(join(dir, 'chronicle.script.yaml'), 'agents:\n  writer:\n    - content: done\n');
}
