import { type Gateway, hashToken, startGateway, TokenStore } from '@troupe/gateway';
import { BUCKETS, type ControlMessage, QueuedTask, subjects, WorkflowRecord } from '@troupe/protocol';
import { createLogger, ensureTroupeStreams, KvStore, NatsBus } from '@troupe/runtime';
import { captureLogger, startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runningRecord } from './support/taskRecord.ts';
import { openWs } from './support/ws.ts';

const TOKENS = {
  admin: 'admin-token-0123456789abcdef',
  ana: 'approver-token-0123456789abcd',
  elsewhere: 'other-approver-0123456789abcd',
  ci: 'submit-token-0123456789abcdef',
  watcher: 'reader-token-0123456789abcdef',
};

/** What the stand-in coordinator heard, with the task it was for. */
const heard: { taskId: string; message: ControlMessage }[] = [];
/** The message id each tell key got, as a coordinator keeps them: a tell again with a key is not a new message. */
const toldKeys = new Map<string, string>();

/**
 * A stand-in for the coordinator running the tasks: it answers as a real one does — `paused-1` is held already,
 * `orphan-1` has no coordinator (the responder's `not_running`), every other running task takes what it is sent.
 */
function answer(taskId: string, message: ControlMessage): unknown {
  const refuse = (code: string, text: string) => ({ ok: false, error: { code, message: text } });
  if (taskId === 'orphan-1') {
    return refuse(
      'not_running',
      `task ${taskId} has not ended (it is at plan, round 1) but no coordinator runs it right now`,
    );
  }
  const held = taskId === 'paused-1';
  switch (message.action) {
    case 'pause':
      return held
        ? refuse('already_paused', `task ${taskId} is paused already; nothing was changed`)
        : { ok: true, taskId, outcome: 'paused' };
    case 'resume':
      return held
        ? { ok: true, taskId, outcome: 'resumed' }
        : refuse('not_paused', `task ${taskId} is not paused; nothing was changed`);
    case 'tell': {
      const messageId = toldKeys.get(`${taskId} ${message.key}`) ?? `told-${heard.length}`;
      toldKeys.set(`${taskId} ${message.key}`, messageId);
      return { ok: true, taskId, outcome: 'told', messageId };
    }
    default:
      return refuse('not_running', 'not here');
  }
}

describe('the gateway steers tasks: pause, resume, tell', () => {
  let nats: TestNats;
  let bus: NatsBus;
  let coordinator: NatsBus;
  let gateway: Gateway;

  beforeAll(async () => {
    nats = await startTestNats();
    bus = await NatsBus.connect({ servers: nats.url, name: 'gateway', logger: captureLogger().logger });
    await ensureTroupeStreams(bus);
    coordinator = await NatsBus.connect({
      servers: nats.url,
      name: 'coordinator',
      logger: captureLogger().logger,
    });
    const store = await KvStore.open(coordinator, BUCKETS.workflows, WorkflowRecord);
    const now = new Date().toISOString();
    await store.put('work-1', runningRecord('work-1', 'demo'));
    await store.put(
      'paused-1',
      runningRecord('paused-1', 'demo', { paused: { since: now, by: 'ana', reason: 'wait' } }),
    );
    await store.put('orphan-1', runningRecord('orphan-1', 'demo'));
    await store.put('done-1', runningRecord('done-1', 'demo', { status: 'completed', state: 'done' }));
    await store.put('other-1', runningRecord('other-1', 'other'));
    // A task stored in TASKS that no coordinator has claimed yet: the gateway knows it by its mark alone.
    const queued = await KvStore.open(coordinator, BUCKETS.queued, QueuedTask);
    await queued.put('queued-1', { taskId: 'queued-1', pipeline: 'demo', goal: 'g', submittedAt: now });
    for (const subject of [subjects.allControl, subjects.allSteer]) {
      coordinator.subscribeText(subject, (delivery) => {
        const taskId = delivery.subject.slice(delivery.subject.lastIndexOf('.') + 1);
        const message = JSON.parse(delivery.value) as ControlMessage;
        heard.push({ taskId, message });
        delivery.respond(answer(taskId, message));
      });
    }
    await coordinator.flush();
    gateway = await startGateway({
      bus,
      logger: createLogger({ level: 'silent' }),
      tokens: new TokenStore([
        { name: 'ops', sha256: hashToken(TOKENS.admin), scopes: ['admin'] },
        { name: 'ana', sha256: hashToken(TOKENS.ana), scopes: ['approve'], pipelines: ['demo'] },
        { name: 'bob', sha256: hashToken(TOKENS.elsewhere), scopes: ['approve'], pipelines: ['other'] },
        { name: 'ci', sha256: hashToken(TOKENS.ci), scopes: ['submit'] },
        { name: 'watcher', sha256: hashToken(TOKENS.watcher), scopes: ['read'] },
      ]),
      port: 0,
    });
  });
  afterAll(async () => {
    await gateway?.close();
    await bus?.close();
    await coordinator?.close();
    await nats?.stop();
  });

  const call = async (path: string, token: keyof typeof TOKENS, body?: unknown, method = 'POST') => {
    const response = await fetch(`${gateway.url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${TOKENS[token]}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await response.text();
    return { status: response.status, body: text ? JSON.parse(text) : undefined };
  };

  it("pauses, resumes and tells with the approve scope, recording the token's name beside the caller's", async () => {
    heard.length = 0;
    expect(await call('/v1/tasks/work-1/pause', 'ana', { reason: 'wrong API' })).toEqual({
      status: 200,
      body: { taskId: 'work-1', status: 'paused' },
    });
    expect(await call('/v1/tasks/paused-1/resume', 'ana', {})).toEqual({
      status: 200,
      body: { taskId: 'paused-1', status: 'running' },
    });
    expect(await call('/v1/tasks/work-1/tell', 'ana', { text: 'use the v2 API', by: 'Ana' })).toEqual({
      status: 200,
      body: { taskId: 'work-1', messageId: 'told-3' },
    });
    // An admin token may too.
    expect((await call('/v1/tasks/work-1/pause', 'admin', {})).status).toBe(200);
    expect(heard).toEqual([
      { taskId: 'work-1', message: { action: 'pause', reason: 'wrong API', by: 'ana' } },
      { taskId: 'paused-1', message: { action: 'resume', by: 'ana' } },
      {
        taskId: 'work-1',
        message: { action: 'tell', text: 'use the v2 API', by: 'Ana (token ana)', key: expect.any(String) },
      },
      { taskId: 'work-1', message: { action: 'pause', by: 'ops' } },
    ]);
  });

  it('refuses a token without the approve scope, and hides a task of a pipeline the token may not touch', async () => {
    heard.length = 0;
    for (const token of ['ci', 'watcher'] as const) {
      const refused = await call('/v1/tasks/work-1/pause', token, {});
      expect(refused).toMatchObject({ status: 403, body: { error: { code: 'forbidden' } } });
      expect(refused.body.error.message).toContain('lacks the approve scope');
    }
    expect(await call('/v1/tasks/work-1/tell', 'elsewhere', { text: 'hi' })).toMatchObject({
      status: 404,
      body: { error: { code: 'not_found', message: 'no task work-1 is known on this server' } },
    });
    expect((await call('/v1/tasks/other-1/tell', 'elsewhere', { text: 'hi' })).status).toBe(200);
    expect(heard.map((h) => h.taskId)).toEqual(['other-1']);
  });

  it('answers 404 unknown, 409 ended or in the wrong state, 503 nobody runs it, 400 a bad body', async () => {
    expect(await call('/v1/tasks/nobody-1/pause', 'ana', {})).toMatchObject({
      status: 404,
      body: { error: { code: 'not_found' } },
    });
    expect(await call('/v1/tasks/done-1/tell', 'ana', { text: 'hi' })).toMatchObject({
      status: 409,
      body: { error: { code: 'conflict', message: 'task done-1 already completed; nothing to tell' } },
    });
    expect(await call('/v1/tasks/paused-1/pause', 'ana', {})).toMatchObject({
      status: 409,
      body: { error: { code: 'conflict', message: 'task paused-1 is paused already; nothing was changed' } },
    });
    expect(await call('/v1/tasks/work-1/resume', 'ana', {})).toMatchObject({
      status: 409,
      body: { error: { code: 'conflict', message: 'task work-1 is not paused; nothing was changed' } },
    });
    const orphan = await call('/v1/tasks/orphan-1/pause', 'ana', {});
    expect(orphan).toMatchObject({ status: 503, body: { error: { code: 'unavailable' } } });
    expect(orphan.body.error.message).toContain('no coordinator runs it right now');
    expect(await call('/v1/tasks/queued-1/tell', 'ana', { text: 'hi' })).toMatchObject({
      status: 503,
      body: {
        error: {
          code: 'unavailable',
          message:
            'task queued-1 is queued: no coordinator has taken it yet, so none can tell it; try again once it runs',
        },
      },
    });
    expect(await call('/v1/tasks/work-1/tell', 'ana', { text: '  ' })).toMatchObject({
      status: 400,
      body: { error: { code: 'invalid_request' } },
    });
    expect((await call('/v1/tasks/work-1/tell', 'ana', {})).status).toBe(400);
    expect((await call('/v1/tasks/work-1/pause', 'ana', { reason: 'x', colour: 'red' })).status).toBe(400);
  });

  it('shows a paused task as paused, with since, by and reason', async () => {
    const paused = await call('/v1/tasks/paused-1', 'watcher', undefined, 'GET');
    expect(paused.status).toBe(200);
    expect(paused.body).toMatchObject({ status: 'running', paused: { by: 'ana', reason: 'wait' } });
    expect((await call('/v1/tasks/work-1', 'watcher', undefined, 'GET')).body.paused).toBeUndefined();
  });

  it('takes pause, resume and tell over the WebSocket, with the same checks', async () => {
    heard.length = 0;
    const ws = await openWs(`${gateway.url.replace('http', 'ws')}/v1/ws?access_token=${TOKENS.ana}`);
    try {
      ws.send({ type: 'pause', id: 'p', taskId: 'work-1', reason: 'hold on' });
      expect(await ws.next((m) => m.id === 'p')).toEqual({
        type: 'reply',
        id: 'p',
        ok: true,
        result: { taskId: 'work-1', status: 'paused' },
      });
      ws.send({ type: 'resume', id: 'r', taskId: 'work-1' });
      expect(await ws.next((m) => m.id === 'r')).toMatchObject({ ok: false, error: { code: 'conflict' } });
      ws.send({ type: 'tell', id: 't', taskId: 'work-1', text: 'v2, please', by: 'Ana' });
      expect(await ws.next((m) => m.id === 't')).toMatchObject({
        ok: true,
        result: { taskId: 'work-1', messageId: expect.any(String) },
      });
      ws.send({ type: 'tell', id: 'x', taskId: 'other-1', text: 'hi' });
      expect(await ws.next((m) => m.id === 'x')).toMatchObject({ ok: false, error: { code: 'not_found' } });
      ws.send({ type: 'tell', id: 'e', taskId: 'work-1', text: '' });
      expect(await ws.next((m) => m.type === 'error')).toMatchObject({ error: { code: 'invalid_message' } });
      for (const id of ['k1', 'k2']) {
        ws.send({ type: 'tell', id, taskId: 'work-1', text: 'again', idempotencyKey: 'ws-key' });
      }
      const first = await ws.next((m) => m.id === 'k1');
      expect(await ws.next((m) => m.id === 'k2')).toMatchObject({ ok: true, result: first.result });
    } finally {
      ws.close();
    }
    expect(heard).toEqual([
      { taskId: 'work-1', message: { action: 'pause', reason: 'hold on', by: 'ana' } },
      { taskId: 'work-1', message: { action: 'resume', by: 'ana' } },
      {
        taskId: 'work-1',
        message: { action: 'tell', text: 'v2, please', by: 'Ana (token ana)', key: expect.any(String) },
      },
      { taskId: 'work-1', message: expect.objectContaining({ action: 'tell', text: 'again' }) },
      { taskId: 'work-1', message: expect.objectContaining({ action: 'tell', text: 'again' }) },
    ]);
    // The same idempotencyKey twice: the same key sent, so one message.
    expect(heard[3]?.message).toEqual(heard[4]?.message);
  });

  it('sends a tell with an Idempotency-Key with the same key each time, per token: a retry is told once', async () => {
    heard.length = 0;
    const tell = async (token: keyof typeof TOKENS, key: string) => {
      const response = await fetch(`${gateway.url}/v1/tasks/work-1/tell`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${TOKENS[token]}`,
          'content-type': 'application/json',
          'idempotency-key': key,
        },
        body: JSON.stringify({ text: 'use v2' }),
      });
      return { status: response.status, body: await response.json() };
    };
    const first = await tell('ana', 'retry-1');
    expect(first).toMatchObject({ status: 200, body: { taskId: 'work-1', messageId: expect.any(String) } });
    expect(await tell('ana', 'retry-1')).toEqual(first);
    // Another key, or the same key from another token, is a tell of its own.
    expect((await tell('ana', 'retry-2')).body.messageId).not.toBe(first.body.messageId);
    expect((await tell('admin', 'retry-1')).body.messageId).not.toBe(first.body.messageId);
    const keys = heard.map(({ message }) => (message.action === 'tell' ? message.key : undefined));
    expect(keys[0]).toMatch(/^g-/);
    expect(keys[1]).toBe(keys[0]);
    expect(new Set(keys).size).toBe(3);
  });

  it('lists the routes in the OpenAPI document', async () => {
    const doc = await call('/openapi.json', 'watcher', undefined, 'GET');
    expect(Object.keys(doc.body.paths)).toEqual(
      expect.arrayContaining([
        '/v1/tasks/{id}/pause',
        '/v1/tasks/{id}/resume',
        '/v1/tasks/{id}/tell',
        '/v1/tasks/{id}/restart',
        '/v1/tasks/{id}/fork',
      ]),
    );
  });
});
