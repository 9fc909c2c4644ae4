import { jetstreamManager } from '@nats-io/jetstream';
import { BUCKETS, STREAMS } from '@troupe/protocol';
import { startTestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EmbeddedNats } from '../../src/transport/embeddedNats.ts';
import { ensureTroupeStreams, jetstreamOf, kvOf } from '../../src/transport/jetstreamSetup.ts';
import { NatsBus } from '../../src/transport/natsBus.ts';
import { captureLogger, type LogLine, startServer } from './natsFixture.ts';

let server: EmbeddedNats;
let bus: NatsBus;
let rival: NatsBus;

beforeAll(async () => {
  server = await startServer();
  bus = await NatsBus.connect({ servers: server.url, name: 'js-test', logger: captureLogger().logger });
  rival = await NatsBus.connect({ servers: server.url, name: 'js-rival', logger: captureLogger().logger });
});

afterAll(async () => {
  await rival?.close();
  await bus?.close();
  await server?.stop();
});

const DAY_MS = 24 * 60 * 60 * 1000;
const DAY_NS = 24 * 60 * 60 * 1e9;

describe('ensureTroupeStreams', () => {
  it('creates the streams and buckets, and survives being raced and repeated', async () => {
    await Promise.all([ensureTroupeStreams(bus), ensureTroupeStreams(rival)]);
    await ensureTroupeStreams(bus);

    const jsm = await jetstreamManager(bus.connection);
    const tasks = await jsm.streams.info(STREAMS.tasks);
    expect(tasks.config).toMatchObject({
      subjects: ['troupe.tasks.>'],
      retention: 'limits',
      storage: 'file',
      max_age: 7 * DAY_NS,
      duplicate_window: 120e9,
    });
    const events = await jsm.streams.info(STREAMS.events);
    expect(events.config).toMatchObject({
      subjects: ['troupe.events.>'],
      storage: 'file',
      max_age: 7 * DAY_NS,
    });
    const names: string[] = [];
    for await (const name of jsm.streams.names()) names.push(name);
    expect(names.sort()).toEqual([
      'DEADLETTER',
      'EVENTS',
      'KV_a2a-push',
      'KV_approvals',
      'KV_journal',
      'KV_memory',
      'KV_pipelines',
      'KV_queued',
      'KV_sessions',
      'KV_versions',
      'KV_workflows',
      'TASKS',
    ]);
    const workflows = await jsm.streams.info('KV_workflows');
    expect(workflows.config).toMatchObject({ max_msgs_per_subject: 1, storage: 'file' });
    // The gateway's marks of queued tasks: one value per task, kept on disk like the records they stand in for.
    const queued = await jsm.streams.info('KV_queued');
    expect(queued.config).toMatchObject({ max_msgs_per_subject: 1, storage: 'file' });
  });

  it('captures tasks and events in their streams and de-duplicates by Nats-Msg-Id', async () => {
    await ensureTroupeStreams(bus);
    const js = jetstreamOf(bus);
    const first = await js.publish('troupe.tasks.x', JSON.stringify({ goal: 'a' }), { msgID: 'task-1' });
    const again = await js.publish('troupe.tasks.x', JSON.stringify({ goal: 'a' }), { msgID: 'task-1' });
    expect(first.stream).toBe('TASKS');
    expect(again.duplicate).toBe(true);
    bus.publish('troupe.events.demo.t1.task.accepted', { any: 'thing' });
    await bus.flush();

    const jsm = await jetstreamManager(bus.connection);
    const tasks = await jsm.streams.info(STREAMS.tasks);
    const events = await jsm.streams.info(STREAMS.events);
    expect(tasks.state.messages).toBe(1);
    expect(events.state.messages).toBe(1);
    const stored = await jsm.streams.getMessage(STREAMS.events, {
      last_by_subj: 'troupe.events.demo.t1.task.accepted',
    });
    expect(stored?.json()).toEqual({ any: 'thing' });
  });

  it('changes the limits it is given on a stream that exists, and keeps them when started without', async () => {
    await ensureTroupeStreams(bus, {
      eventsMaxAge: 60 * 60 * 1000,
      eventsMaxBytes: 64 * 1024 * 1024,
      duplicateWindowMs: 30_000,
    });
    const jsm = await jetstreamManager(bus.connection);
    const events = await jsm.streams.info(STREAMS.events);
    expect(events.config.max_age).toBe(3_600e9);
    expect(events.config.max_bytes).toBe(64 * 1024 * 1024);
    expect(events.config.duplicate_window).toBe(30e9);
    // A second coordinator started without the options does not undo them.
    await ensureTroupeStreams(bus);
    const kept = (await jsm.streams.info(STREAMS.events)).config;
    expect(kept.max_age).toBe(3_600e9);
    expect(kept.max_bytes).toBe(64 * 1024 * 1024);
    // Given again, they change again; the tasks' stream keeps its own.
    await ensureTroupeStreams(bus, { eventsMaxAge: 7 * DAY_MS, eventsMaxBytes: -1 });
    const back = (await jsm.streams.info(STREAMS.events)).config;
    expect(back.max_age).toBe(7 * DAY_NS);
    expect(back.max_bytes).toBe(-1);
    expect((await jsm.streams.info(STREAMS.tasks)).config.max_age).toBe(7 * DAY_NS);
  });

  it('keeps the duplicate window within a max age shorter than it, and restores it when the max age grows', async () => {
    const jsm = await jetstreamManager(bus.connection);
    await ensureTroupeStreams(bus);
    await ensureTroupeStreams(bus, { eventsMaxAge: 60_000 });
    const short = (await jsm.streams.info(STREAMS.events)).config;
    expect(short.max_age).toBe(60e9);
    expect(short.duplicate_window).toBe(60e9);
    await ensureTroupeStreams(bus, { eventsMaxAge: 7 * DAY_MS });
    const long = (await jsm.streams.info(STREAMS.events)).config;
    expect(long.max_age).toBe(7 * DAY_NS);
    expect(long.duplicate_window).toBe(120e9);
  });

  it('opens the KV buckets for reading and writing', async () => {
    const kv = await kvOf(bus, BUCKETS.workflows);
    await kv.put('task-1', JSON.stringify({ state: 'running' }));
    await kv.put('task-1', JSON.stringify({ state: 'done' }));
    const entry = await kv.get('task-1');
    expect(entry?.json()).toEqual({ state: 'done' });
    const history: unknown[] = [];
    for await (const e of await kv.history({ key: 'task-1' })) history.push(e.json());
    expect(history).toEqual([{ state: 'done' }]);
  });

  it('fails with jetstream_unavailable on a server without JetStream, once its bound has passed', async () => {
    const plain = await startTestNats({ jetstream: false });
    const { logger, lines } = captureLogger();
    const plainBus = await NatsBus.connect({ servers: plain.url, name: 'no-js', logger });
    try {
      const started = performance.now();
      const error = await ensureTroupeStreams(plainBus, { wait: { noJetStreamMs: 1_000 } }).catch((e) => e);
      const elapsed = performance.now() - started;
      expect(error).toMatchObject({ name: 'TransportError', code: 'jetstream_unavailable' });
      expect(error.message).toContain('Start nats-server with -js');
      // 1 s of waits plus the last backoff (1 s); far below the 5 minutes an outage is given.
      expect(elapsed).toBeGreaterThanOrEqual(1_000);
      expect(elapsed).toBeLessThan(15_000);
      expect(waits(lines).length).toBeGreaterThan(0);
      expect(waits(lines)[0]).toMatchObject({
        waitingFor: 'the JetStream API',
        err: { message: expect.stringContaining('jetstream is not enabled') },
      });
    } finally {
      await plainBus.close();
      await plain.stop();
    }
  });

  it('fails at once, without waiting, when a stream conflicts with one already on the server', async () => {
    const nats = await startTestNats();
    const { logger, lines } = captureLogger();
    const other = await NatsBus.connect({ servers: nats.url, name: 'js-conflict', logger });
    try {
      const jsm = await jetstreamManager(other.connection);
      await jsm.streams.add({ name: 'SQUATTER', subjects: ['troupe.tasks.>'] });
      await expect(ensureTroupeStreams(other)).rejects.toMatchObject({
        code: 'stream_setup_failed',
        message: expect.stringContaining('cannot set up stream TASKS'),
      });
      expect(waits(lines)).toEqual([]);
    } finally {
      await other.close();
      await nats.stop();
    }
  });
});

/** The warn lines of waits for JetStream. */
const waits = (lines: LogLine[]): LogLine[] => lines.filter((l) => l.level === 40 && 'waitingFor' in l);

describe('ensureTroupeStreams through a NATS outage', () => {
  it('waits while nats-server is down, logging each wait, and finishes once it is back', async () => {
    const nats = await startTestNats();
    const { logger, lines } = captureLogger();
    const patient = await NatsBus.connect({ servers: nats.url, name: 'js-outage', logger });
    try {
      await nats.pause();
      let settled = false;
      const setup = ensureTroupeStreams(patient).then(
        () => 'ready',
        (error: unknown) => error,
      );
      void setup.finally(() => (settled = true));
      // Without waiting, set-up fails with the first timeout and logs no wait.
      await expect.poll(() => settled || waits(lines).length > 0, { timeout: 30_000 }).toBe(true);
      await nats.resume();

      expect(await setup).toBe('ready');
      expect(waits(lines)[0]).toMatchObject({
        waitingFor: 'the JetStream API',
        err: { message: expect.stringContaining('timeout') },
        retryInMs: 250,
        msg: expect.stringContaining('trying again in 250 ms'),
      });
      for (const wait of waits(lines)) {
        expect(wait).toMatchObject({ server: expect.any(String), retryInMs: expect.any(Number) });
        expect(wait.err).toMatchObject({ message: expect.any(String) });
      }
      const jsm = await jetstreamManager(patient.connection);
      expect((await jsm.streams.info(STREAMS.events)).config.name).toBe(STREAMS.events);
      expect((await jsm.streams.info('KV_workflows')).config.name).toBe('KV_workflows');
    } finally {
      await patient.close();
      await nats.stop();
    }
  }, 60_000);
});
