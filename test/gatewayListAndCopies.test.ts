import { type Gateway, hashToken, startGateway, TokenStore } from '@troupe/gateway';
import { BUCKETS, subjects, type TroupeEvent, WorkflowRecord } from '@troupe/protocol';
import { createLogger, EventFactory, ensureTroupeStreams, KvStore, NatsBus } from '@troupe/runtime';
import { publishToStream } from '@troupe/runtime/bus';
import { captureLogger, startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readSse } from './support/sse.ts';
import { openWs } from './support/ws.ts';

const TOKEN = 'list-copies-admin-token-0123456789';
const auth = { authorization: `Bearer ${TOKEN}` };

describe("the gateway's task list by paused, and its relays of an event stored twice", () => {
  let nats: TestNats;
  let bus: NatsBus;
  let gateway: Gateway;
  /** The events of task `copied-1`, its pause stored twice (republished past the duplicate window, as a restore does). */
  let copied: TroupeEvent[];
  /** Where each of them was stored in EVENTS. */
  const seqs: number[] = [];

  beforeAll(async () => {
    nats = await startTestNats();
    bus = await NatsBus.connect({ servers: nats.url, name: 'list-copies', logger: captureLogger().logger });
    await ensureTroupeStreams(bus);
    const store = await KvStore.open(bus, BUCKETS.workflows, WorkflowRecord);
    const now = new Date().toISOString();
    const record = (taskId: string, extra: Partial<WorkflowRecord> = {}): WorkflowRecord => ({
      taskId,
      pipeline: 'demo',
      streamSequence: 1,
      status: 'running',
      state: 'plan',
      goal: 'g',
      round: 1,
      usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
      createdAt: now,
      updatedAt: now,
      ...extra,
    });
    await store.put('work-1', record('work-1'));
    await store.put('paused-1', record('paused-1', { paused: { since: now, by: 'ana', reason: 'wait' } }));
    await store.put('done-1', record('done-1', { status: 'completed', state: 'completed' }));
    await store.put('copied-1', record('copied-1', { status: 'completed', state: 'completed' }));

    const events = new EventFactory();
    const scope = {
      pipeline: 'demo',
      taskId: 'copied-1',
      traceparent: `00-${'1'.repeat(32)}-${'2'.repeat(16)}-01`,
    };
    const paused = events.make('task.paused', scope, { state: 'plan', round: 1, by: 'ana', since: now });
    copied = [
      events.make('task.accepted', scope, { goal: 'g' }),
      paused,
      paused,
      events.make('task.completed', scope, {
        output: 'done',
        rounds: 1,
        usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
        usageByAgent: {},
        durationMs: 1,
      }),
    ];
    for (const [i, event] of copied.entries()) {
      // A message id of each copy's own: the stream keeps both, as it does a copy published past its window.
      const ack = await publishToStream(
        bus,
        subjects.event('demo', 'copied-1', event.kind),
        JSON.stringify(event),
        {
          msgId: `copy-${i}`,
        },
      );
      seqs.push(ack.seq);
    }
    gateway = await startGateway({
      bus,
      logger: createLogger({ level: 'silent' }),
      tokens: new TokenStore([{ name: 'ops', sha256: hashToken(TOKEN), scopes: ['admin'] }]),
      port: 0,
      dashboardDir: false,
    });
  });
  afterAll(async () => {
    await gateway?.close();
    await bus?.close();
    await nats?.stop();
  });

  const list = async (query: string) => {
    const response = await fetch(`${gateway.url}/v1/tasks${query}`, { headers: auth });
    return { status: response.status, body: (await response.json()) as { tasks?: { taskId: string }[] } };
  };
  const ids = (body: { tasks?: { taskId: string }[] }) => (body.tasks ?? []).map((t) => t.taskId).sort();

  it('lists the held tasks under ?status=paused, and every running one, held or not, under ?status=running', async () => {
    expect(ids((await list('?status=paused')).body)).toEqual(['paused-1']);
    expect(ids((await list('?status=running')).body)).toEqual(['paused-1', 'work-1']);
    expect(ids((await list('?status=completed')).body)).toEqual(['copied-1', 'done-1']);
    const unknown = await list('?status=held');
    expect(unknown.status).toBe(400);
    expect(JSON.stringify(unknown.body)).toContain('paused');
  });

  it("relays an event stored twice once on a task's SSE stream, on the all-events stream and on the WebSocket", async () => {
    const pausedId = copied[1]?.id;
    const task = await readSse(`${gateway.url}/v1/tasks/copied-1/events`, { headers: auth });
    expect(task.ended).toBe(true);
    expect(task.messages.map((m) => m.event)).toEqual(['task.accepted', 'task.paused', 'task.completed']);

    // Its `ready` first, then the three events.
    const all = await readSse(`${gateway.url}/v1/events?after=0`, { headers: auth, stopAfter: 4 });
    const stored = all.messages.filter((m) => m.event !== 'ready');
    expect(stored.map((m) => (JSON.parse(m.data) as TroupeEvent).id)).toEqual([
      ...new Set(copied.map((e) => e.id)),
    ]);

    const ws = await openWs(`${gateway.url.replace('http', 'ws')}/v1/ws?access_token=${TOKEN}`);
    try {
      ws.send({ type: 'subscribe', id: '1', taskId: 'copied-1' });
      await ws.next((m) => m.type === 'end' && m.taskId === 'copied-1', 10_000);
      const relayed = ws.received.filter((m) => m.type === 'event').map((m) => m.event.id as string);
      expect(relayed).toEqual([...new Set(copied.map((e) => e.id))]);
      expect(relayed.filter((id) => id === pausedId)).toHaveLength(1);
    } finally {
      ws.close();
    }
  });

  it('does not relay to a resumed stream the copy of an event it had before it resumed', async () => {
    // The client saw the accepted and the first pause (Last-Event-ID: that pause's sequence), then lost the stream.
    const resumed = await readSse(`${gateway.url}/v1/tasks/copied-1/events`, {
      headers: { ...auth, 'last-event-id': String(seqs[1]) },
    });
    expect(resumed.messages.map((m) => m.event)).toEqual(['task.completed']);
    expect(resumed.messages[0]?.id).toBe(String(seqs[3]));
    const ws = await openWs(`${gateway.url.replace('http', 'ws')}/v1/ws?access_token=${TOKEN}`);
    try {
      ws.send({ type: 'subscribe', id: '1', taskId: 'copied-1', after: seqs[1] });
      await ws.next((m) => m.type === 'end' && m.taskId === 'copied-1', 10_000);
      expect(ws.received.filter((m) => m.type === 'event').map((m) => m.event.kind)).toEqual([
        'task.completed',
      ]);
    } finally {
      ws.close();
    }
  });
});
