import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { builtinTools, type Coordinator, loadPipeline, startCoordinator } from '@troupe/coordinator';
import { startGateway, TokenStore } from '@troupe/gateway';
import {
  BUCKETS,
  InvalidMessageEvent,
  parseMessage,
  STREAMS,
  subjects,
  WorkflowRecord,
} from '@troupe/protocol';
import { createLogger, KvStore, NatsBus } from '@troupe/runtime';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixturePath, waitUntil } from './support/harness.ts';

/**
 * Tasks published from outside from the very moment the `TASKS` stream appears, while a coordinator is still
 * starting: every task the stream acknowledged must run, or be reported on `troupe.events._invalid`.
 */
describe('tasks stored while a coordinator starts', () => {
  let nats: TestNats;
  let client: NatsConnection;
  let workspaceRoot: string;
  /** How each task ended, from its record: events published while this client reconnects would be missed. */
  const finals = new Map<string, string>();
  const reported: InvalidMessageEvent[] = [];
  const running: { coordinator: Coordinator; bus: NatsBus }[] = [];

  beforeAll(async () => {
    nats = await startTestNats();
    workspaceRoot = await mkdtemp(join(tmpdir(), 'troupe-ws-'));
    client = await connect({ servers: nats.url, name: 'outside-publisher' });
    client.subscribe(subjects.invalid, {
      callback: (_error, msg) => {
        const parsed = parseMessage(InvalidMessageEvent, msg.data);
        if (parsed.ok) reported.push(parsed.value);
      },
    });
    await client.flush();
  });
  afterAll(async () => {
    for (const { coordinator, bus } of running) {
      await coordinator.stop();
      await bus.close();
    }
    await client?.close();
    await nats?.stop();
    if (workspaceRoot) await rm(workspaceRoot, { recursive: true, force: true });
  });

  /** Resolves once every task's record says it ended, noting how in `finals`; fails naming those that have not. */
  async function allEnded(ids: string[]): Promise<void> {
    const { bus } = running.at(-1) ?? {};
    if (!bus) throw new Error('no coordinator runs');
    const records = await KvStore.open(bus, BUCKETS.workflows, WorkflowRecord);
    const deadline = Date.now() + 60_000;
    for (;;) {
      const left = ids.filter((id) => !finals.has(id));
      if (left.length === 0) return;
      if (Date.now() > deadline) {
        throw new Error(
          `${left.length} of ${ids.length} stored tasks never ended: ${left.slice(0, 5).join(', ')}`,
        );
      }
      for (const id of left) {
        // A read fails while the connection is still down after a restart: the loop tries again.
        const status = (await records.get(id).catch(() => undefined))?.value.status;
        if (status !== undefined && status !== 'running') finals.set(id, status);
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  async function start(files: string[]): Promise<{ coordinator: Coordinator; bus: NatsBus }> {
    const logger = createLogger({ level: process.env.TROUPE_TEST_LOG ?? 'silent' });
    const bus = await NatsBus.connect({ servers: nats.url, name: 'starting-coordinator', logger });
    const registry = builtinTools();
    const pipelines = await Promise.all(
      files.map((f) => loadPipeline(fixturePath(f), { toolNames: registry.names() })),
    );
    const coordinator = await startCoordinator({ bus, pipelines, logger, workspaceRoot, registry });
    const started = { coordinator, bus };
    running.push(started);
    return started;
  }

  /**
   * Publishes tasks with JetStream publishes from the moment the `TASKS` stream appears (the first sign from
   * outside that the service is there), back to back until `until` resolves and `atLeast` tasks per pipeline are
   * stored. Returns the ids the stream acknowledged, by pipeline.
   */
  async function publishFromTheStart(
    prefix: string,
    pipelines: string[],
    until: Promise<unknown>,
    atLeast: number,
  ): Promise<Map<string, string[]>> {
    const jsm = await jetstreamManager(client);
    for (;;) {
      const found = await jsm.streams.info(STREAMS.tasks).catch(() => undefined);
      if (found) break;
      await new Promise((resolve) => setTimeout(resolve, 1));
    }
    const js = jetstream(client);
    const stored = new Map(pipelines.map((p) => [p, [] as string[]]));
    let done = false;
    void until.finally(() => (done = true));
    for (let n = 0; !done || [...stored.values()].some((ids) => ids.length < atLeast); n++) {
      const pipeline = pipelines[n % pipelines.length] as string;
      const id = `${prefix}-${pipeline}-${n}`;
      try {
        await js.publish(subjects.task(pipeline), JSON.stringify({ id, goal: `task ${n}` }), { msgID: id });
        stored.get(pipeline)?.push(id);
      } catch {
        // Not stored (the server restarting): the publisher was told so, and tries the next one.
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    }
    return stored;
  }

  it('runs every task stored from the moment the stream appears, and reports those no coordinator serves', async () => {
    const starting = start(['outline.yaml']);
    const stored = await publishFromTheStart('first', ['outline', 'nope'], starting, 10);
    await starting;
    const outline = stored.get('outline') ?? [];
    const nope = stored.get('nope') ?? [];
    await allEnded(outline);
    expect(outline.filter((id) => finals.get(id) !== 'completed')).toEqual([]);
    // The unknown pipeline's tasks are reported, each with the promise that it is kept.
    await waitUntil(
      () => nope.every((id) => reported.some((r) => r.payload?.includes(`"${id}"`))),
      'a report for every task of an unknown pipeline',
    );
    const report = reported.find((r) => r.subject === subjects.task('nope'));
    expect(report?.reason).toMatch(
      /no pipeline named "nope" is loaded.*kept and runs once a coordinator serves "nope"/,
    );
  });

  it('runs the tasks stored while no coordinator ran, for a pipeline served for the first time after a restart', async () => {
    const first = running.shift();
    await first?.coordinator.stop();
    await first?.bus.close();
    // A client can tell when a pipeline is served: the gateway's /readyz?pipeline= says so.
    const logger = createLogger({ level: 'silent' });
    const gatewayBus = await NatsBus.connect({ servers: nats.url, name: 'readiness-gateway', logger });
    const gateway = await startGateway({
      bus: gatewayBus,
      logger,
      tokens: await TokenStore.load(undefined, {}),
      auth: 'none',
      port: 0,
      idSecret: 'a-secret-for-this-test-only-0123456789',
      dashboardDir: false,
    });
    const readiness = async (query: string) => {
      const response = await fetch(`${gateway.url}/readyz${query}`);
      return { status: response.status, body: (await response.json()) as { message?: string } };
    };
    let stored: Map<string, string[]>[];
    try {
      expect((await readiness('')).status).toBe(200);
      expect((await readiness('?pipeline=outline')).status).toBe(200);
      const notYet = await readiness('?pipeline=outline,memo');
      expect(notYet.status).toBe(503);
      expect(notYet.body.message).toMatch(/no coordinator has served "memo" yet; served: outline/);
      // Stored while nothing runs: `memo` has never been served, so it has no consumer yet.
      const waiting = await publishFromTheStart('down', ['outline', 'memo'], Promise.resolve(), 5);
      const starting = start(['outline.yaml', 'memo.yaml']);
      const during = await publishFromTheStart('restart', ['outline', 'memo'], starting, 5);
      await starting;
      expect((await readiness('?pipeline=outline&pipeline=memo')).status).toBe(200);
      stored = [waiting, during];
    } finally {
      await gateway.close();
      await gatewayBus.close();
    }
    const ids = stored.flatMap((byPipeline) => [...byPipeline.values()].flat());
    await allEnded(ids);
    expect(ids.filter((id) => finals.get(id) !== 'completed')).toEqual([]);
  });

  it('runs every task stored while the NATS server and the coordinator restart', async () => {
    const restarting = (async () => {
      const current = running.shift();
      await current?.coordinator.stop();
      await current?.bus.close();
      await nats.restart();
      await start(['outline.yaml', 'memo.yaml']);
    })();
    const stored = await publishFromTheStart('again', ['outline', 'memo'], restarting, 5);
    await restarting;
    const ids = [...stored.values()].flat();
    await allEnded(ids);
    expect(ids.filter((id) => finals.get(id) !== 'completed')).toEqual([]);
  });
});

describe('a coordinator that waits for JetStream to start', () => {
  it('lets its intake guard go of each task after a bound, saying it could not tell, and stops cleanly', async () => {
    const plain = await startTestNats({ jetstream: false });
    const lines: string[] = [];
    const logger = createLogger({
      level: 'warn',
      destination: { write: (line: string) => void lines.push(line) },
    });
    const bus = await NatsBus.connect({ servers: plain.url, name: 'waiting-coordinator', logger });
    const client = await connect({ servers: plain.url, name: 'outside-publisher' });
    try {
      const registry = builtinTools();
      const pipelines = [await loadPipeline(fixturePath('outline.yaml'), { toolNames: registry.names() })];
      const starting = startCoordinator({ bus, pipelines, logger, workspaceRoot: '/nonexistent', registry });
      starting.catch(() => {});
      // Sent until one reaches the guard, whose subscription the server may not know of yet.
      await waitUntil(
        () => {
          client.publish(subjects.task('nope'), JSON.stringify({ goal: 'published while JetStream is off' }));
          return lines.some((l) => l.includes('cannot tell whether a coordinator serves troupe.tasks.nope'));
        },
        'the guard to give up on the task',
        20_000,
      );
      // Once, however many tasks arrive meanwhile.
      expect(lines.filter((l) => l.includes('cannot tell whether a coordinator serves')).length).toBe(1);
      // Stopping the connection ends the start-up's wait for JetStream with an error, not a hang.
      await bus.close();
      await expect(starting).rejects.toThrow();
    } finally {
      await client.close();
      await bus.close();
      await plain.stop();
    }
  });
});
