import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { eventsOf, STREAMS, subjects, type TroupeEvent } from '@troupe/protocol';
import { startTestNats } from '@troupe/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import type { EmbeddedNats } from '../../src/transport/embeddedNats.ts';
import { batchId } from '../../src/transport/eventBatcher.ts';
import { EventOutbox } from '../../src/transport/eventOutbox.ts';
import { ensureTroupeStreams } from '../../src/transport/jetstreamSetup.ts';
import { NatsBus } from '../../src/transport/natsBus.ts';
import { captureLogger, startServer } from './natsFixture.ts';

const TRACEPARENT = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';

function toolCall(taskId: string, n: number, args = '{}'): TroupeEvent {
  return {
    id: `${taskId}:tool.call:s-1:1:${n}`,
    ts: new Date(0).toISOString(),
    pipeline: 'demo',
    taskId,
    kind: 'tool.call',
    traceparent: TRACEPARENT,
    data: { agent: 'coder', stepId: 's-1', callId: `c-${n}`, tool: 'read', arguments: args },
  };
}

function accepted(taskId: string): TroupeEvent {
  return {
    id: `${taskId}:task.accepted`,
    ts: new Date(0).toISOString(),
    pipeline: 'demo',
    taskId,
    kind: 'task.accepted',
    traceparent: TRACEPARENT,
    data: { goal: 'go' },
  };
}

let server: EmbeddedNats;
let raw: NatsConnection;
const buses: NatsBus[] = [];

beforeAll(async () => {
  server = await startServer();
  raw = await connect({ servers: server.url });
  const setup = await NatsBus.connect({ servers: server.url, name: 'setup', logger: captureLogger().logger });
  await ensureTroupeStreams(setup);
  await setup.close();
});

afterAll(async () => {
  for (const bus of buses) await bus.close();
  await raw?.close();
  await server?.stop();
});

async function batchingBus(name: string, opts: { eventBatchLingerMs?: number } = {}) {
  const { logger, lines } = captureLogger();
  const bus = await NatsBus.connect({ servers: server.url, name, logger, eventBatch: true, ...opts });
  buses.push(bus);
  return { bus, lines };
}

/** What the EVENTS stream holds of a task: each message's subject and the event ids in it, in stream order. */
async function storedOf(taskId: string): Promise<{ subject: string; ids: string[] }[]> {
  const jsm = await jetstreamManager(raw);
  const { state } = await jsm.streams.info(STREAMS.events);
  const found: { subject: string; ids: string[] }[] = [];
  for (let seq = state.first_seq; seq <= state.last_seq && state.messages > 0; seq++) {
    const msg = await jsm.streams.getMessage(STREAMS.events, { seq }).catch(() => null);
    if (!msg?.subject.startsWith(`troupe.events.demo.${taskId}.`)) continue;
    const parsed = eventsOf(msg.data, msg.subject);
    if (!parsed.ok) throw new Error(parsed.reason);
    found.push({ subject: msg.subject, ids: parsed.value.map((e) => e.id) });
  }
  return found;
}

describe('a bus with event batching on, through JetStream', () => {
  it('stores a task’s events of one flush as one message, and its task.* event after them, alone', async () => {
    const { bus, lines } = await batchingBus('batch-flush');
    const task = 'bt-flush';
    const calls = [1, 2, 3, 4, 5].map((n) => toolCall(task, n));
    const outcomes = [...calls, accepted(task)].map((event) => bus.publishEvent(event));
    expect(await Promise.all(outcomes)).toEqual([true, true, true, true, true, true]);
    expect(await storedOf(task)).toEqual([
      { subject: subjects.eventBatch('demo', task), ids: calls.map((e) => e.id) },
      { subject: subjects.event('demo', task, 'task.accepted'), ids: [accepted(task).id] },
    ]);
    // Still one log line per event, as without batching.
    expect(lines.filter((l) => l.dir === 'out')).toHaveLength(6);
    expect(bus.pendingEvents).toBe(0);
  });

  it('is stored once when the same batch is sent again, as after a lost acknowledgement', async () => {
    const { bus } = await batchingBus('batch-resend');
    const task = 'bt-resend';
    const calls = [1, 2, 3].map((n) => toolCall(task, n));
    // The first send reached the stream, and its acknowledgement was lost: the stream has the batch already.
    const id = batchId(calls.map((e) => e.id));
    const first = await jetstream(raw).publish(
      subjects.eventBatch('demo', task),
      JSON.stringify({ batch: id, events: calls }),
      { msgID: id },
    );
    expect(first.duplicate).toBe(false);
    // The outbox sends the batch again: the same events make the same batch id, which the stream drops.
    expect(await Promise.all(calls.map((event) => bus.publishEvent(event)))).toEqual([true, true, true]);
    expect(await storedOf(task)).toEqual([
      { subject: subjects.eventBatch('demo', task), ids: calls.map((e) => e.id) },
    ]);
  });

  it('sends the open batches before closing: drain stores them', async () => {
    const { bus } = await batchingBus('batch-drain');
    const task = 'bt-drain';
    const calls = [1, 2].map((n) => toolCall(task, n));
    for (const event of calls) void bus.publishEvent(event);
    await bus.drain();
    expect(await storedOf(task)).toEqual([
      { subject: subjects.eventBatch('demo', task), ids: calls.map((e) => e.id) },
    ]);
  });
});

function stepCompleted(taskId: string): TroupeEvent {
  return {
    id: `${taskId}:step.completed:s-1`,
    ts: new Date(0).toISOString(),
    pipeline: 'demo',
    taskId,
    kind: 'step.completed',
    traceparent: TRACEPARENT,
    data: {
      step: 'code',
      agent: 'coder',
      round: 1,
      stepId: 's-1',
      ok: true,
      output: 'done',
      usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 1 },
      turns: 1,
      durationMs: 3,
    },
  };
}

describe('whether a bus batches its events', () => {
  afterEach(() => {
    vi.unstubAllEnvs();
  });

  /** What the stream stored of two tool calls of a task the bus made with `opts` published. */
  async function storedWith(task: string, opts: { eventBatch?: boolean } = {}) {
    const { logger, lines } = captureLogger();
    const bus = await NatsBus.connect({ servers: server.url, name: task, logger, ...opts });
    buses.push(bus);
    const calls = [1, 2].map((n) => toolCall(task, n));
    expect(await Promise.all(calls.map((event) => bus.publishEvent(event)))).toEqual([true, true]);
    return { stored: await storedOf(task), calls, lines };
  }

  it('batches by default, with TROUPE_EVENT_BATCH unset, 1, or a value it warns about', async () => {
    for (const [task, value] of [
      ['bt-default', undefined],
      ['bt-env-1', '1'],
      ['bt-env-odd', 'no'],
    ] as const) {
      vi.stubEnv('TROUPE_EVENT_BATCH', value);
      const { stored, calls, lines } = await storedWith(task);
      expect(stored, task).toEqual([
        { subject: subjects.eventBatch('demo', task), ids: calls.map((e) => e.id) },
      ]);
      const warned = lines.some((l) => String(l.msg).includes('TROUPE_EVENT_BATCH=no is neither 0 nor 1'));
      expect(warned, task).toBe(value === 'no');
    }
  });

  it('sends each event alone with eventBatch: false, or TROUPE_EVENT_BATCH=0 when the options do not say', async () => {
    vi.stubEnv('TROUPE_EVENT_BATCH', '1');
    const byOption = await storedWith('bt-off-option', { eventBatch: false });
    vi.stubEnv('TROUPE_EVENT_BATCH', '0');
    const byEnv = await storedWith('bt-off-env');
    // The options win over the environment.
    const batched = await storedWith('bt-on-option', { eventBatch: true });
    for (const { stored, calls } of [byOption, byEnv]) {
      expect(stored).toEqual(
        calls.map((e) => ({ subject: subjects.event('demo', e.taskId, 'tool.call'), ids: [e.id] })),
      );
    }
    expect(batched.stored).toHaveLength(1);
  });

  it('stores a task’s open batch at once on sendOpenEvents, not after the linger; a step’s end alone does not', async () => {
    const { bus } = await batchingBus('batch-send-open', { eventBatchLingerMs: 60_000 });
    const task = 'bt-send-open';
    const events = [toolCall(task, 1), stepCompleted(task)];
    for (const event of events) void bus.publishEvent(event);
    // A step's end alone does not send it.
    expect(bus.pendingEvents).toBe(2);
    bus.sendOpenEvents('demo', 'bt-other');
    expect(bus.pendingEvents).toBe(2);
    bus.sendOpenEvents('demo', task);
    await vi.waitFor(async () =>
      expect(await storedOf(task)).toEqual([
        { subject: subjects.eventBatch('demo', task), ids: events.map((e) => e.id) },
      ]),
    );
  });

  it('keeps each batch within a server’s smaller max_payload, so no batch is refused whole', async () => {
    const small = await startTestNats({ config: 'max_payload: 8192\n' });
    try {
      const setup = await NatsBus.connect({
        servers: small.url,
        name: 'setup',
        logger: captureLogger().logger,
      });
      await ensureTroupeStreams(setup);
      await setup.close();
      const bus = await NatsBus.connect({
        servers: small.url,
        name: 'small',
        logger: captureLogger().logger,
        eventBatch: true,
        eventBatchLingerMs: 1_000,
      });
      // 40 events of about 400 bytes: 16 KB together, twice what one message may carry here.
      const events = Array.from({ length: 40 }, (_, n) =>
        toolCall('task-small', n, JSON.stringify({ text: 'x'.repeat(300) })),
      );
      const stored = events.map((event) => bus.publishEvent(event));
      bus.sendOpenEvents('demo', 'task-small');
      expect(await Promise.all(stored)).toEqual(events.map(() => true));
      await bus.close();
    } finally {
      await small.stop();
    }
  });

  it('refuses a linger that is not a number of milliseconds, 0 or more', async () => {
    await expect(
      NatsBus.connect({
        servers: server.url,
        name: 'bad-linger',
        logger: captureLogger().logger,
        eventBatchLingerMs: -5,
      }),
    ).rejects.toThrow(RangeError);
  });
});

describe('an outbox that has stopped', () => {
  it('gives up at once on a batch handed to it late, rather than keeping it unsettled', async () => {
    const nc = await connect({ servers: server.url });
    try {
      const outbox = new EventOutbox({ connection: nc, logger: captureLogger().logger });
      outbox.stop();
      const late = outbox.add({
        id: 'late~2~x',
        subject: subjects.eventBatch('demo', 'bt-late'),
        data: '{}',
        headers: {},
      });
      expect(await late).toBe(false);
      expect(outbox.size).toBe(0);
    } finally {
      await nc.close();
    }
  });
});
