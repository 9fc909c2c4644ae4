import { openQueuedStore, type QueuedStore, submitToPipeline } from '@troupe/client';
import { type Gateway, hashToken, startGateway, TokenStore } from '@troupe/gateway';
import { QUEUED_MARK_HEADER, STREAMS, subjects, TroupeEvent } from '@troupe/protocol';
import { createLogger, defineTool, jetstreamManagerOf } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { callGateway, startAdminGateway } from './support/adminGateway.ts';
import {
  fixturePath,
  type Harness,
  kinds,
  startHarness,
  startSecondCoordinator,
  waitUntil,
} from './support/harness.ts';
import { readSse } from './support/sse.ts';
import { openWs } from './support/ws.ts';

const ADMIN = 'admin-token-0123456789abcdef';
const DEMO_ONLY = 'demo-submit-token-0123456789ab';

/** Each task's `spin` call holds its working slot until the test lets that task go. */
const held = new Map<string, () => void>();
const letGo = new Map<string, Promise<void>>();
const gateOf = (taskId: string) => {
  let gate = letGo.get(taskId);
  if (!gate) {
    gate = new Promise<void>((resolve) => held.set(taskId, resolve));
    letGo.set(taskId, gate);
  }
  return gate;
};
const spin = defineTool({
  name: 'spin',
  description: 'Keep busy until let go',
  input: z.object({ ms: z.number() }),
  run: async (_input, ctx) => {
    await gateOf(ctx.taskId);
    return 'spun';
  },
});

/**
 * A task stored in TASKS that no coordinator has claimed yet: the one working slot (busy's concurrency is 1) is held
 * by a task whose tool is still running, so the next waits in the stream. Through the gateway it is visible,
 * followable and cancellable at once.
 */
describe('the gateway: a queued task', () => {
  let h: Harness;
  let gateway: Gateway;

  beforeAll(async () => {
    h = await startHarness([fixturePath('busy.yaml')], { concurrency: 1, tools: [spin] });
    gateway = await startGateway({
      bus: h.bus,
      logger: createLogger({ level: 'silent' }),
      tokens: new TokenStore([
        { name: 'ops', sha256: hashToken(ADMIN), scopes: ['admin'] },
        { name: 'ci', sha256: hashToken(DEMO_ONLY), scopes: ['submit'], pipelines: ['demo'] },
      ]),
      port: 0,
    });
  });
  afterAll(async () => {
    await gateway?.close();
    await h?.stop();
  });

  const call = (method: string, path: string, body?: unknown, token = ADMIN) =>
    callGateway(gateway, token, method, path, body);
  /** Holds busy's one slot: the task's tool runs until it is let go. */
  const holdTheSlot = async (id: string) => {
    expect((await call('POST', '/v1/pipelines/busy/tasks', { goal: 'spin', id })).status).toBe(202);
    await waitUntil(() => kinds(h.eventsOf(id)).includes('tool.call'));
  };
  const releaseTheSlot = async (id: string) => {
    gateOf(id);
    held.get(id)?.();
    expect((await h.finalOf(id)).kind).toBe('task.completed');
  };

  it('shows a queued task as submitted, lists it, follows it, and runs it once there is room', async () => {
    await holdTheSlot('q-hold-1');
    const submitted = await call('POST', '/v1/pipelines/busy/tasks', {
      goal: 'release v2',
      id: 'q-wait-1',
      metadata: { ticket: 'T-7' },
    });
    expect(submitted).toMatchObject({ status: 202, body: { taskId: 'q-wait-1', status: 'submitted' } });
    // Straight after the 202, with no coordinator free to take it: it is there, as submitted.
    const got = await call('GET', '/v1/tasks/q-wait-1');
    expect(got).toMatchObject({
      status: 200,
      body: {
        taskId: 'q-wait-1',
        pipeline: 'busy',
        goal: 'release v2',
        status: 'submitted',
        metadata: { ticket: 'T-7' },
      },
    });
    expect(got.body.createdAt).toEqual(expect.any(String));
    const listed = await call('GET', '/v1/tasks?status=submitted');
    expect(listed.body.tasks.map((t: { taskId: string }) => t.taskId)).toEqual(['q-wait-1']);
    // A token limited to another pipeline is told there is no such task, as for a running one.
    expect((await call('GET', '/v1/tasks/q-wait-1', undefined, DEMO_ONLY)).status).toBe(404);
    // Its event stream and a WebSocket subscription open now and carry its events once it runs.
    const sse = readSse(`${gateway.url}/v1/tasks/q-wait-1/events`, {
      headers: { authorization: `Bearer ${ADMIN}` },
    });
    const ws = await openWs(`${gateway.url.replace('http', 'ws')}/v1/ws?access_token=${ADMIN}`);
    try {
      ws.send({ type: 'subscribe', id: 'f1', taskId: 'q-wait-1' });
      expect(await ws.next((m) => m.id === 'f1')).toMatchObject({ ok: true, result: { subscribed: true } });
      expect(kinds(h.eventsOf('q-wait-1'))).toEqual([]);
      await releaseTheSlot('q-hold-1');
      // Now it runs, holding the slot in its turn until it is let go.
      await waitUntil(() => kinds(h.eventsOf('q-wait-1')).includes('tool.call'));
      expect((await call('GET', '/v1/tasks/q-wait-1')).body).toMatchObject({
        status: 'running',
        goal: 'release v2',
      });
      await releaseTheSlot('q-wait-1');
      expect(await ws.next((m) => m.type === 'end' && m.taskId === 'q-wait-1', 30_000)).toBeTruthy();
      const read = await sse;
      expect(read.ended).toBe(true);
      const streamed = read.messages.map((m) => TroupeEvent.parse(JSON.parse(m.data)).kind);
      expect(streamed[0]).toBe('task.accepted');
      expect(streamed.at(-1)).toBe('task.completed');
      expect(ws.received.filter((m) => m.type === 'event').map((m) => m.event.kind)).toEqual(streamed);
    } finally {
      ws.close();
    }
    // Claimed: the record says where it stands, and the list shows it once.
    const list = await call('GET', '/v1/tasks?pipeline=busy');
    expect(list.body.tasks.filter((t: { taskId: string }) => t.taskId === 'q-wait-1')).toEqual([
      expect.objectContaining({ status: 'completed' }),
    ]);
  }, 90_000);

  it('cancels a queued task: once a coordinator has room it ends it cancelled, running none of its steps', async () => {
    await holdTheSlot('q-hold-2');
    expect(
      (await call('POST', '/v1/pipelines/busy/tasks', { goal: 'release v3', id: 'q-cancel-1' })).status,
    ).toBe(202);
    const sse = readSse(`${gateway.url}/v1/tasks/q-cancel-1/events`, {
      headers: { authorization: `Bearer ${ADMIN}` },
    });
    expect(
      await call('POST', '/v1/tasks/q-cancel-1/cancel', { reason: 'not needed' }, DEMO_ONLY),
    ).toMatchObject({
      status: 404,
    });
    const cancelled = await call('POST', '/v1/tasks/q-cancel-1/cancel', { reason: 'not needed' });
    expect(cancelled).toMatchObject({ status: 200, body: { taskId: 'q-cancel-1', status: 'cancelled' } });
    // Asked again while it still waits: the same answer.
    expect((await call('POST', '/v1/tasks/q-cancel-1/cancel', {})).status).toBe(200);
    await releaseTheSlot('q-hold-2');
    const final = await h.finalOf('q-cancel-1');
    expect(final.kind).toBe('task.cancelled');
    expect(final.kind === 'task.cancelled' && final.data.reason).toBe('not needed (token ops)');
    // Its usual first and last events, and nothing between: no step of it started.
    expect(kinds(h.eventsOf('q-cancel-1'))).toEqual(['task.accepted', 'task.cancelled']);
    await expect.poll(async () => (await call('GET', '/v1/tasks/q-cancel-1')).body.status).toBe('cancelled');
    const read = await sse;
    expect(read.ended).toBe(true);
    expect(TroupeEvent.parse(JSON.parse(read.messages.at(-1)?.data ?? '{}')).kind).toBe('task.cancelled');
    // Ended: a cancel now is refused as for any ended task.
    expect((await call('POST', '/v1/tasks/q-cancel-1/cancel', {})).status).toBe(409);
  }, 90_000);

  it('shows a restart or fork made through it as submitted at once, and cancels it while it waits', async () => {
    await holdTheSlot('q-orig-1');
    await releaseTheSlot('q-orig-1');
    await holdTheSlot('q-hold-fam');
    const forked = await call('POST', '/v1/tasks/q-orig-1/fork', { at: 'spin' });
    expect(forked).toMatchObject({ status: 202, body: { origin: { taskId: 'q-orig-1', kind: 'fork' } } });
    const newId: string = forked.body.taskId;
    // Straight after the 202, with no coordinator free to take it: it is there, as a submit's task is.
    expect(await call('GET', `/v1/tasks/${newId}`)).toMatchObject({
      status: 200,
      body: { taskId: newId, pipeline: 'busy', status: 'submitted' },
    });
    expect(await call('POST', `/v1/tasks/${newId}/cancel`, { reason: 'wrong step' })).toMatchObject({
      status: 200,
      body: { status: 'cancelled' },
    });
    await releaseTheSlot('q-hold-fam');
    expect((await h.finalOf(newId)).kind).toBe('task.cancelled');
    expect(kinds(h.eventsOf(newId))).toEqual(['task.accepted', 'task.cancelled']);
  }, 90_000);

  it('submits a task whose mark cannot be written all the same, unmarked', async () => {
    const refusing = {
      create: async () => {
        throw new Error('Permissions Violation for Publish to "$KV.queued.q-unmarked-1"');
      },
    } as unknown as QueuedStore;
    const submitted = await submitToPipeline(
      h.bus,
      'busy',
      { id: 'q-unmarked-1', goal: 'spin' },
      { queued: { store: refusing, now: () => new Date().toISOString() } },
    );
    expect(submitted).toMatchObject({ taskId: 'q-unmarked-1', duplicate: false });
    await waitUntil(() => kinds(h.eventsOf('q-unmarked-1')).includes('tool.call'));
    await releaseTheSlot('q-unmarked-1');
  }, 90_000);

  it('cancels a queued task whose mark was written though its write seemed to fail (the reply was lost)', async () => {
    await holdTheSlot('q-hold-5');
    const marks = await openQueuedStore(h.bus);
    if (!marks) throw new Error('KV queued is missing');
    const lostReply = {
      create: async (key: string, value: Parameters<QueuedStore['create']>[1]) => {
        await marks.create(key, value);
        throw new Error('TIMEOUT');
      },
      delete: (key: string) => marks.delete(key),
    } as unknown as QueuedStore;
    const submitted = await submitToPipeline(
      h.bus,
      'busy',
      { id: 'q-lost-1', goal: 'release v6' },
      { queued: { store: lostReply, now: () => new Date().toISOString() } },
    );
    expect(submitted).toMatchObject({ taskId: 'q-lost-1', duplicate: false });
    expect(await call('POST', '/v1/tasks/q-lost-1/cancel', { reason: 'lost' })).toMatchObject({
      status: 200,
      body: { status: 'cancelled' },
    });
    await releaseTheSlot('q-hold-5');
    const final = await h.finalOf('q-lost-1');
    expect(final.kind === 'task.cancelled' && final.data.reason).toBe('lost (token ops)');
    expect(kinds(h.eventsOf('q-lost-1'))).toEqual(['task.accepted', 'task.cancelled']);
  }, 90_000);

  it('cancels a queued task whose submit was retried after a try that marked it and died before publishing', async () => {
    await holdTheSlot('q-hold-4');
    // What a gateway that died between its mark and its publish left behind.
    const marks = await openQueuedStore(h.bus);
    await marks?.create('q-retry-1', {
      taskId: 'q-retry-1',
      pipeline: 'busy',
      goal: 'release v5',
      submittedAt: new Date().toISOString(),
    });
    // The client's retry publishes the task; the mark there already, the message says it has one all the same.
    expect(
      (await call('POST', '/v1/pipelines/busy/tasks', { goal: 'release v5', id: 'q-retry-1' })).status,
    ).toBe(202);
    const jsm = await jetstreamManagerOf(h.bus);
    const stored = await jsm.streams.getMessage(STREAMS.tasks, { last_by_subj: subjects.task('busy') });
    expect(stored?.json<{ id: string }>().id).toBe('q-retry-1');
    expect(stored?.header.get(QUEUED_MARK_HEADER)).toBe('1');
    expect((await call('POST', '/v1/tasks/q-retry-1/cancel', { reason: 'retried' })).status).toBe(200);
    await releaseTheSlot('q-hold-4');
    const final = await h.finalOf('q-retry-1');
    expect(final.kind === 'task.cancelled' && final.data.reason).toBe('retried (token ops)');
    expect(kinds(h.eventsOf('q-retry-1'))).toEqual(['task.accepted', 'task.cancelled']);
  }, 90_000);

  it('says a task published by a plain NATS client is not known until a coordinator takes it', async () => {
    await holdTheSlot('q-hold-3');
    h.client.publish('troupe.tasks.busy', JSON.stringify({ id: 'q-plain-1', goal: 'release v4' }));
    await h.client.flush();
    expect((await call('GET', '/v1/tasks/q-plain-1')).status).toBe(404);
    await releaseTheSlot('q-hold-3');
    await waitUntil(() => kinds(h.eventsOf('q-plain-1')).includes('tool.call'));
    expect((await call('GET', '/v1/tasks/q-plain-1')).body).toMatchObject({ status: 'running' });
    await releaseTheSlot('q-plain-1');
  }, 90_000);
});

describe('the gateway: a task submitted while no coordinator runs', () => {
  let h: Harness;
  let gateway: Gateway;
  let second: { stop(): Promise<void> } | undefined;

  beforeAll(async () => {
    h = await startHarness([fixturePath('summing.yaml')]);
    // The pipeline stays registered; nothing takes its tasks until another coordinator starts.
    await h.coordinator.stop();
    gateway = await startAdminGateway(h.bus, ADMIN);
  });
  afterAll(async () => {
    await gateway?.close();
    await second?.stop();
    await h?.stop();
  });

  const call = (method: string, path: string, body?: unknown) =>
    callGateway(gateway, ADMIN, method, path, body);

  it('is there as submitted, is cancelled, and the coordinator that starts later ends it without running it', async () => {
    const sum = { goal: 'add', input: { numbers: [1, 2, 3] } };
    expect((await call('POST', '/v1/pipelines/summing/tasks', { ...sum, id: 'q-down-1' })).status).toBe(202);
    expect((await call('POST', '/v1/pipelines/summing/tasks', { ...sum, id: 'q-down-2' })).status).toBe(202);
    expect((await call('GET', '/v1/tasks/q-down-1')).body).toMatchObject({
      status: 'submitted',
      goal: 'add',
    });
    expect(await call('POST', '/v1/tasks/q-down-1/cancel', { reason: 'wrong numbers' })).toMatchObject({
      status: 200,
      body: { status: 'cancelled' },
    });
    second = await startSecondCoordinator(h, ['summing.yaml']);
    const cancelled = await h.finalOf('q-down-1');
    expect(cancelled.kind === 'task.cancelled' && cancelled.data.reason).toBe('wrong numbers (token ops)');
    expect(kinds(h.eventsOf('q-down-1'))).toEqual(['task.accepted', 'task.cancelled']);
    // The one not cancelled runs as any task.
    expect((await h.finalOf('q-down-2')).kind).toBe('task.completed');
    await expect.poll(async () => (await call('GET', '/v1/tasks/q-down-1')).body.status).toBe('cancelled');
    expect((await call('GET', '/v1/tasks?status=submitted')).body.tasks).toEqual([]);
  }, 90_000);
});
