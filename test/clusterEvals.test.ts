import { jetstreamManager } from '@nats-io/jetstream';
import { recordedCases } from '@troupe/client';
import {
  BUCKETS,
  type EventData,
  type EventKind,
  emptyUsage,
  type TroupeEvent,
  WorkflowRecord,
} from '@troupe/protocol';
import { EventFactory, findFreePort, preview } from '@troupe/runtime';
import {
  connectBus,
  ensureTroupeStreams,
  type JetStreamBus,
  KvStore,
  readNatsAccess,
  StepJournal,
} from '@troupe/runtime/bus';
import { captureLogger, startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { z } from 'zod';
import { examplePath, fixturePath } from './support/harness.ts';
import { type NatsUsers, writeNatsUsers } from './support/natsUsers.ts';

/** The first reply of the task, longer than an event keeps: its event holds the start, the journal the whole. */
const LONG = 'a long first draft. '.repeat(400);
const TASK = 'clu-eval-1';
const STEP = `${TASK}.record.1`;

/**
 * Three nats-servers clustered on loopback, Troupe's buckets on all three (`--replicas 3`), each part logged in as
 * its user of the block `troupe nats-config --replicas 3` wrote: an evaluator of `clustered` reads its ended task's
 * journal records by key (a direct get any replica answers), where a bucket kept on several servers is otherwise read
 * from its leader by a request whose key the broker cannot see — a request no evaluator is allowed, since it would
 * read every pipeline's journal. An evaluator of another pipeline is refused the same records.
 */
describe('an evaluator of some pipelines on a three-node cluster', () => {
  const nodes: TestNats[] = [];
  const buses: JetStreamBus[] = [];
  let users: NatsUsers;

  /** A bus as `user`, on `node`. */
  const busOf = async (user: string, node: TestNats) => {
    const env = await users.env(user, node.url);
    const bus = await connectBus({
      servers: node.url,
      access: await readNatsAccess({ nkey: env.NATS_NKEY, inbox: env.TROUPE_INBOX }),
      name: `cluster-evals-${user}`,
      logger: captureLogger().logger,
    });
    buses.push(bus);
    return bus;
  };

  beforeAll(async () => {
    users = await writeNatsUsers([
      fixturePath('clustered.yaml'),
      examplePath('demo.yaml'),
      ...['--coordinator', 'harness', '--evaluator', 'judge=clustered', '--evaluator', 'narrow=demo'],
      ...['--replicas', '3'],
    ]);
    const routes = await Promise.all([0, 1, 2].map(() => findFreePort()));
    const config = (port: number) =>
      `cluster {\n  name: troupe-evals-test\n  listen: 127.0.0.1:${port}\n  routes: [${routes
        .map((p) => `nats-route://127.0.0.1:${p}`)
        .join(', ')}]\n}\n${users.config}`;
    nodes.push(...(await Promise.all(routes.map((port) => startTestNats({ config: config(port) })))));
    const [n1] = nodes as [TestNats];
    // What a coordinator makes and records of an ended task: its buckets on three servers, its events, its record
    // and the journal's whole record of the reply its event kept only in part.
    const harness = await busOf('harness', n1);
    // Until the cluster has a JetStream leader to make them.
    await vi.waitFor(() => ensureTroupeStreams(harness, { replicas: 3 }), { timeout: 60_000, interval: 500 });
    await record(harness);
  }, 120_000);
  afterAll(async () => {
    for (const bus of buses.splice(0)) await bus.close();
    for (const node of nodes) await node.stop();
    await users?.remove();
  });

  it('reads its pipeline’s journal records by key from any replica, and another pipeline’s evaluator is refused them', async () => {
    const [n1, n2, n3] = nodes as [TestNats, TestNats, TestNats];
    const raw = await users.connect('harness', n1.url);
    const info = await (await jetstreamManager(raw)).streams.info(`KV_${BUCKETS.journal}`);
    await raw.close();
    expect(info.config).toMatchObject({ num_replicas: 3, allow_direct: true });

    const judge = await busOf('judge', n2);
    const { cases, skipped } = await recordedCases(judge, { taskIds: [TASK] });
    expect(skipped).toEqual([]);
    const journal = cases[0]?.recording?.journal ?? {};
    expect(Object.keys(journal)).toEqual([StepJournal.modelKey(STEP, 1)]);
    expect(JSON.stringify(journal)).toContain(JSON.stringify(LONG).slice(1, -1));

    // The read a client makes of a bucket kept on several servers, from its leader, names no key: refused.
    const judgeRaw = await users.connect('judge', n2.url);
    const leaderRead = await judgeRaw
      .request(
        `$JS.API.STREAM.MSG.GET.KV_${BUCKETS.journal}`,
        JSON.stringify({ last_by_subj: '$KV.journal.>' }),
      )
      .then(
        () => 'answered',
        (error: Error) => `${error.message} ${String(error.cause ?? '')}`,
      );
    await judgeRaw.close();
    expect(leaderRead).toContain('Permissions Violation');

    const narrow = await busOf('narrow', n3);
    const refused = await recordedCases(narrow, { taskIds: [TASK], pipeline: 'clustered' });
    expect(refused.cases).toEqual([]);
    expect(refused.skipped).toEqual([
      { taskId: TASK, why: expect.stringContaining('Permissions Violation') },
    ]);
  }, 60_000);
});

/** A completed task of `clustered` as a coordinator records it (see the gateway's datasetRuns test). */
async function record(bus: JetStreamBus): Promise<void> {
  const createdAt = '2026-12-01T09:00:00.000Z';
  const factory = new EventFactory({ now: () => Date.parse(createdAt) });
  const scope = { pipeline: 'clustered', taskId: TASK, traceparent: '' };
  const make = <K extends EventKind>(kind: K, data: z.input<(typeof EventData)[K]>): TroupeEvent =>
    factory.make(kind, scope, data);
  const usage = { inputTokens: 3, outputTokens: 2, cachedTokens: 0 };
  const totals = { ...emptyUsage(), ...usage, modelCalls: 1 };
  const reply = {
    content: LONG,
    toolCalls: [],
    usage,
    costUsd: 0,
    finishReason: 'stop' as const,
    provider: 'openai',
    model: 'gpt-x',
    durationMs: 1,
  };
  const events = [
    make('task.accepted', { goal: 'record it' }),
    make('step.started', { step: 'record', agent: 'recorder', round: 1, stepId: STEP }),
    make('llm.response', { agent: 'recorder', stepId: STEP, turn: 1, ...reply, content: preview(LONG) }),
    make('step.completed', {
      ...{ step: 'record', agent: 'recorder', round: 1, stepId: STEP, ok: true, output: 'done' },
      ...{ usage: totals, turns: 1, durationMs: 2 },
    }),
    make('task.completed', { output: 'recorded', rounds: 1, usage: totals, usageByAgent: {}, durationMs: 3 }),
  ];
  for (const event of events) expect(await bus.publishEvent(event)).toBe(true);
  const journal = (await StepJournal.open(bus)).forPipeline('clustered');
  await journal.recordModelReply(StepJournal.modelKey(STEP, 1), [], reply, new Date(createdAt));
  const workflows = await KvStore.open(bus, BUCKETS.workflows, WorkflowRecord);
  await workflows.put(TASK, {
    taskId: TASK,
    pipeline: 'clustered',
    streamSequence: 0,
    status: 'completed',
    state: 'done',
    goal: 'record it',
    round: 1,
    usage: emptyUsage(),
    createdAt,
    updatedAt: createdAt,
  });
}
