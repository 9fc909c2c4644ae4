import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, type Msg } from '@nats-io/transport-node';
import { STREAMS, subjects, type TroupeEvent } from '@troupe/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type EmbeddedNats, startNatsServer } from '../../src/transport/embeddedNats.ts';
import { ensureTroupeStreams } from '../../src/transport/jetstreamSetup.ts';
import { NatsBus } from '../../src/transport/natsBus.ts';
import { captureLogger, eventually, type LogLine, startServer } from './natsFixture.ts';

const TRACEPARENT = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';

function event(id: string): TroupeEvent {
  return {
    id,
    ts: new Date(0).toISOString(),
    pipeline: 'demo',
    taskId: 't-outbox',
    kind: 'task.accepted',
    traceparent: TRACEPARENT,
    data: { goal: id },
  };
}

const ids = (prefix: string, from: number, to: number): string[] =>
  Array.from({ length: to - from + 1 }, (_, i) => `${prefix}-${from + i}`);

/** A nats-server that can be stopped and started again on the same port and store, as a restart would. */
interface RestartableNats {
  url: string;
  stop(): Promise<void>;
  start(): Promise<void>;
  dispose(): Promise<void>;
}

async function restartableNats(): Promise<RestartableNats> {
  const dataDir = await mkdtemp(join(tmpdir(), 'troupe-outbox-test-'));
  let server: EmbeddedNats | undefined = await startNatsServer({ dataDir });
  const { url, port } = server;
  return {
    url,
    // EmbeddedNats.stop sends SIGTERM to the server's pid and waits for it to exit.
    stop: async () => {
      await server?.stop();
      server = undefined;
    },
    start: async () => {
      server = await startNatsServer({ dataDir, port });
    },
    dispose: async () => {
      await server?.stop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

/** The event ids stored in the `EVENTS` stream, in stream order. */
async function storedIds(url: string, prefix: string): Promise<string[]> {
  const nc = await connect({ servers: url });
  try {
    const jsm = await jetstreamManager(nc);
    const { state } = await jsm.streams.info(STREAMS.events);
    const found: string[] = [];
    for (let seq = state.first_seq; seq <= state.last_seq && state.messages > 0; seq++) {
      const id = (await jsm.streams.getMessage(STREAMS.events, { seq }))?.json<TroupeEvent>().id;
      if (id?.startsWith(`${prefix}-`)) found.push(id);
    }
    return found;
  } finally {
    await nc.close();
  }
}

const errorsIn = (lines: LogLine[]) => lines.filter((l) => l.level >= 50);

describe('event publishing across a nats-server restart', () => {
  let nats: RestartableNats;
  const buses: NatsBus[] = [];

  beforeAll(async () => {
    nats = await restartableNats();
    const setup = await NatsBus.connect({ servers: nats.url, name: 'setup', logger: captureLogger().logger });
    await ensureTroupeStreams(setup);
    await setup.close();
  });

  afterAll(async () => {
    for (const bus of buses) await bus.close();
    await nats?.dispose();
  });

  async function busWithStatus(name: string, maxPendingEvents?: number) {
    const { logger, lines } = captureLogger();
    const bus = await NatsBus.connect({
      servers: nats.url,
      name,
      logger,
      ...(maxPendingEvents === undefined ? {} : { maxPendingEvents }),
    });
    buses.push(bus);
    const seen: string[] = [];
    bus.onStatus((s) => seen.push(s.type));
    return { bus, lines, seen };
  }

  it('stores every event exactly once: those sent before, during and after the outage', async () => {
    const { bus, lines, seen } = await busWithStatus('outbox-restart');
    for (const id of ids('ev', 1, 5)) bus.publishEvent(event(id));
    await eventually(() => bus.pendingEvents === 0);

    // In flight when the server goes: some may be stored and their acks lost, some lost outright.
    for (const id of ids('ev', 6, 10)) bus.publishEvent(event(id));
    await nats.stop();
    await eventually(() => seen.includes('disconnect'), 5_000);

    for (const id of ids('ev', 11, 15)) bus.publishEvent(event(id));
    expect(bus.pendingEvents).toBeGreaterThanOrEqual(5);

    await nats.start();
    await eventually(() => seen.includes('reconnect') && bus.pendingEvents === 0, 20_000);

    const stored = await storedIds(nats.url, 'ev');
    expect([...stored].sort()).toEqual(ids('ev', 1, 15).sort());
    expect(stored).toHaveLength(15);
    expect(lines.filter((l) => l.dir === 'out')).toHaveLength(15);
    expect(errorsIn(lines)).toEqual([]);
  }, 40_000);

  it('keeps at most maxPendingEvents, dropping the oldest with an error that counts them', async () => {
    const { bus, lines, seen } = await busWithStatus('outbox-small', 5);
    await nats.stop();
    await eventually(() => seen.includes('disconnect'), 5_000);

    const outcomes = ids('ov', 1, 8).map((id) => bus.publishEvent(event(id)));
    expect(bus.pendingEvents).toBe(5);
    // The dropped say so at once; the kept say so once stored.
    expect(await Promise.all(outcomes.slice(0, 3))).toEqual([false, false, false]);
    await eventually(() => errorsIn(lines).length > 0);
    expect(errorsIn(lines).map((l) => [l.msg, l.dropped])).toEqual([
      ['dropped the 3 oldest unsent events: more than 5 were waiting for NATS', 3],
    ]);

    await nats.start();
    await eventually(() => seen.includes('reconnect') && bus.pendingEvents === 0, 20_000);
    expect((await storedIds(nats.url, 'ov')).sort()).toEqual(ids('ov', 4, 8).sort());
    expect(await Promise.all(outcomes.slice(3))).toEqual([true, true, true, true, true]);
  }, 40_000);

  it('drain waits until the events published are stored', async () => {
    const { bus } = await busWithStatus('outbox-drain');
    for (const id of ids('dr', 1, 20)) bus.publishEvent(event(id));
    await bus.drain();

    expect(bus.connection.isClosed()).toBe(true);
    expect((await storedIds(nats.url, 'dr')).sort()).toEqual(ids('dr', 1, 20).sort());
  });
});

describe('event publishing with no stream to store events', () => {
  for (const jetstream of [true, false]) {
    it(`sends them as plain messages and warns once (JetStream ${jetstream ? 'on' : 'off'})`, async () => {
      const server = await startServer({ jetstream });
      const { logger, lines } = captureLogger();
      const bus = await NatsBus.connect({ servers: server.url, name: 'outbox-plain', logger });
      const watcher = await connect({ servers: server.url });
      try {
        const got: Msg[] = [];
        watcher.subscribe(subjects.allTaskEvents, { callback: (_error, msg) => void got.push(msg) });
        await watcher.flush();

        for (const id of ids('plain', 1, 3)) bus.publishEvent(event(id));
        await eventually(() => got.length === 3);
        for (const id of ids('plain', 4, 5)) bus.publishEvent(event(id));
        await eventually(() => got.length === 5 && bus.pendingEvents === 0);
        await new Promise((resolve) => setTimeout(resolve, 200));

        expect(got.map((m) => m.json<TroupeEvent>().id)).toEqual(ids('plain', 1, 5));
        expect(got[0]?.headers?.get('Nats-Msg-Id')).toBe('plain-1');
        expect(got[0]?.headers?.get('traceparent')).toBe(TRACEPARENT);
        const warnings = lines.filter((l) => l.level === 40 && /events are not stored/.test(l.msg));
        expect(warnings).toHaveLength(1);
        expect(errorsIn(lines)).toEqual([]);
      } finally {
        await watcher.close();
        await bus.close();
        await server.stop();
      }
    });
  }
});
