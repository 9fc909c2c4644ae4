import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DeliverPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import { BUCKETS, FINAL_EVENT_KINDS, STREAMS, subjects, type TroupeEvent } from '@troupe/protocol';
import { findFreePort } from '@troupe/runtime';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, startTroupe } from './support/cli.ts';
import { eventsInMessage, fixturePath, waiter } from './support/harness.ts';
import { type NatsUsers, writeNatsUsers } from './support/natsUsers.ts';

/** Whether every stream, and every consumer of TASKS, has all three replicas current. */
async function clusterHealthy(jsm: Awaited<ReturnType<typeof jetstreamManager>>): Promise<boolean> {
  const current = (cluster?: { replicas?: { current: boolean; offline?: boolean }[] }) =>
    (cluster?.replicas ?? []).length === 2 && (cluster?.replicas ?? []).every((r) => r.current && !r.offline);
  try {
    for await (const stream of jsm.streams.list()) {
      if (!current(stream.cluster)) return false;
    }
    for await (const consumer of jsm.consumers.list(STREAMS.tasks)) {
      if (!current(consumer.cluster)) return false;
    }
    return true;
  } catch {
    return false;
  }
}

/**
 * Three nats-servers clustered on loopback, Troupe's streams and buckets on all three (`--replicas 3`), two
 * coordinators and a worker each connected to a different node, each logged in as its own user of the block
 * `troupe nats-config --replicas 3` wrote. A node is killed with tasks mid-step, brought back, then the node leading
 * the TASKS stream is killed: every task completes once, and every event is stored.
 */
describe('a three-node JetStream cluster losing nodes mid-run', () => {
  const nodes: TestNats[] = [];
  let users: NatsUsers;
  const envs = new Map<string, NodeJS.ProcessEnv>();
  const processes: CliProcess[] = [];
  let client: NatsConnection;
  let home: string;
  const live: TroupeEvent[] = [];
  const { notify, waitFor: until } = waiter();
  const ids = Array.from({ length: 24 }, (_, i) => `clu-${i + 1}`);

  beforeAll(async () => {
    home = await mkdtemp(join(tmpdir(), 'troupe-cluster-'));
    users = await writeNatsUsers([
      fixturePath('clustered.yaml'),
      '--coordinator',
      'a',
      '--coordinator',
      'b',
      '--coordinator',
      'harness',
      '--worker',
      'w=clustered:recorder,closer',
      '--replicas',
      '3',
    ]);
    const routes = await Promise.all(nodes.length === 0 ? [0, 1, 2].map(() => findFreePort()) : []);
    const config = (port: number) =>
      `cluster {\n  name: troupe-test\n  listen: 127.0.0.1:${port}\n  routes: [${routes
        .map((p) => `nats-route://127.0.0.1:${p}`)
        .join(', ')}]\n}\n${users.config}`;
    nodes.push(...(await Promise.all(routes.map((port) => startTestNats({ config: config(port) })))));
    for (const [user, node] of [
      ['a', 0],
      ['b', 1],
      ['w', 2],
    ] as const)
      envs.set(user, await users.env(user, (nodes[node] as TestNats).url));
    client = await users.connect(
      'harness',
      nodes.map((n) => n.url),
      'cluster-test',
    );
    client.subscribe(subjects.allTaskEvents, {
      callback: (_error, msg) => {
        live.push(...eventsInMessage(msg));
        notify();
      },
    });
    await client.flush();
  }, 60_000);
  afterAll(async () => {
    for (const p of processes.splice(0)) await p.stop('SIGKILL');
    await client?.close();
    for (const node of nodes) await node.stop();
    await users?.remove();
    await rm(home, { recursive: true, force: true });
  });

  /** Starts `troupe <args>` as `user`, on `node`. */
  const start = (args: string[], user: string, node: TestNats) => {
    const p = startTroupe([...args, '--server', node.url, '--replicas', '3'], envs.get(user));
    processes.push(p);
    return p;
  };
  /** The name of the server each node runs as, to find the one a stream's leader is. */
  const serverName = async (node: TestNats) => {
    const nc = await users.connect('harness', node.url);
    const name = nc.info?.server_name;
    await nc.close();
    return name;
  };
  const kill = (node: TestNats) => process.kill(node.pid, 'SIGKILL');

  it('completes every task once, with every event stored, through two killed nodes', async () => {
    const [n1, n2, n3] = nodes as [TestNats, TestNats, TestNats];
    const a = start(['up', fixturePath('clustered.yaml'), '--no-agents', '--home', join(home, 'a')], 'a', n1);
    await a.waitFor(/troupe is up/, 60_000);
    const b = start(['up', fixturePath('clustered.yaml'), '--no-agents', '--home', join(home, 'b')], 'b', n2);
    const worker = start(['worker', fixturePath('clustered.yaml'), '--home', join(home, 'w')], 'w', n3);
    await b.waitFor(/troupe is up/, 60_000);
    await worker.waitFor(/serving|ready|worker is up/i, 60_000);
    const jsm = await jetstreamManager(client);
    expect((await jsm.streams.info(STREAMS.tasks)).config.num_replicas).toBe(3);

    const js = jetstream(client);
    const submit = async (batch: readonly string[]) => {
      for (const id of batch) {
        await js.publish(subjects.task('clustered'), JSON.stringify({ id, goal: 'record it' }), {
          msgID: id,
          retries: 20,
        });
      }
    };
    const workflows = await new Kvm(client).open(BUCKETS.workflows);
    // How each task ended, from its record: a subscriber may miss events while it moves to another node.
    const completed = async (batch: readonly string[]) => {
      const statuses = await Promise.all(
        batch.map(
          async (id) => (await workflows.get(id).catch(() => null))?.json<{ status: string }>().status,
        ),
      );
      return statuses.filter((status) => status === 'completed').length;
    };
    const [first, second] = [ids.slice(0, 12), ids.slice(12)];
    const startedOf = (batch: readonly string[]) =>
      new Set(live.filter((e) => e.kind === 'step.started' && batch.includes(e.taskId)).map((e) => e.taskId))
        .size;

    // Mid-run: the first tasks at their first step, none ended. The node coordinator A is connected to goes first.
    await submit(first);
    await until(() => (startedOf(first) >= 4 ? true : undefined), 'tasks to start', 60_000);
    const firstKill = Date.now();
    kill(n1);
    await expect.poll(() => completed(first), { timeout: 120_000, interval: 500 }).toBe(first.length);
    const firstDone = Date.now();
    await n1.restart();
    // Once the node is back and current in every stream and consumer (as an operator waits before the next
    // upgrade or failure: a cluster of three keeps a quorum with one node down, not two)…
    await expect.poll(() => clusterHealthy(jsm), { timeout: 60_000, interval: 500 }).toBe(true);
    const healthy = Date.now();
    // …more tasks start, and the node that leads the TASKS stream now goes while they are at work.
    await submit(second);
    await until(() => (startedOf(second) >= 4 ? true : undefined), 'more tasks to start', 60_000);
    const leader = (await jsm.streams.info(STREAMS.tasks)).cluster?.leader;
    const names = await Promise.all(nodes.map(serverName));
    const leading = nodes[names.indexOf(leader as string)] as TestNats;
    expect(leading).toBeDefined();
    const leaderKill = Date.now();
    kill(leading);
    expect(await completed(second)).toBeLessThan(second.length);
    await expect.poll(() => completed(second), { timeout: 120_000, interval: 500 }).toBe(second.length);
    const allDone = Date.now();
    // Nothing any part needed was refused it, through the failovers too.
    for (const p of processes) expect(p.output()).not.toMatch(/Permissions Violation/i);

    // Every task completed once; its side effect happened once.
    for (const id of ids) {
      const ledger = readFileSync(join(home, 'w', 'workspaces', 'clustered', id, 'ledger.txt'), 'utf8');
      expect(ledger.trim().split('\n'), id).toEqual(['recorded']);
    }
    // No event was lost: every event published live is in the EVENTS stream, which the surviving nodes hold. (The
    // test's own reads go through the election too: each is tried again until the stream answers.)
    /** The pipeline's events in EVENTS, read until a fetch finds no more (a short read is read again, below). */
    const storedIds = async (): Promise<Set<string> | undefined> => {
      try {
        const ids = new Set<string>();
        const consumer = await js.consumers.get(STREAMS.events, {
          filter_subjects: 'troupe.events.clustered.>',
          deliver_policy: DeliverPolicy.All,
        });
        for (;;) {
          let got = 0;
          for await (const msg of await consumer.fetch({ max_messages: 500, expires: 2_000 })) {
            for (const event of eventsInMessage(msg)) ids.add(event.id);
            got += 1;
          }
          if (got === 0) return ids;
        }
      } catch {
        return undefined;
      }
    };
    const seenLive = [...new Set(live.map((e) => e.id))];
    let stored = new Set<string>();
    let missing = seenLive;
    await expect
      .poll(
        async () => {
          const read = await storedIds();
          if (read) {
            stored = read;
            missing = seenLive.filter((id) => !stored.has(id));
          }
          return missing;
        },
        { timeout: 60_000, interval: 1_000 },
      )
      .toEqual([]);
    // One final event per task, and it says completed.
    const finals = [...stored].filter((id) => FINAL_EVENT_KINDS.some((kind) => id.includes(`:${kind}`)));
    expect(finals.sort()).toEqual(ids.map((id) => `${id}:task.completed`).sort());
    const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
    console.info(
      `cluster: ${ids.length} tasks through two killed nodes (the second the TASKS leader), ${stored.size} events stored; ` +
        `the first 12 had completed ${s(firstDone - firstKill)} after the first kill, the restarted node was current ${s(healthy - firstDone)} after its start, ` +
        `the second 12 had completed ${s(allDone - leaderKill)} after the leader's kill`,
    );
  }, 300_000);
});
