import type { WorkflowRecord } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { createActor } from 'xstate';
import { PipelineConfig } from '../../src/config/pipelineSchema.ts';
import { claim } from '../../src/intake/claim.ts';
import { triage } from '../../src/intake/triage.ts';
import { CheckpointWriter } from '../../src/task/checkpointWriter.ts';
import { TaskSteering } from '../../src/task/taskSteering.ts';
import type { WorkflowSnapshot } from '../../src/task/workflowChild.ts';
import { config, deliveryOf, intakeServices } from '../intake/taskServices.ts';

/** The core workload's flow: plan, execute, review, an agent each. */
const core = PipelineConfig.parse({
  ...config,
  agents: {
    planner: { instructions: 'Plan.' },
    executor: { instructions: 'Do it.' },
    reviewer: { instructions: 'Review.' },
  },
  flow: [
    { id: 'plan', kind: 'agent', agent: 'planner' },
    { id: 'execute', kind: 'agent', agent: 'executor' },
    { id: 'review', kind: 'agent', agent: 'reviewer' },
  ],
});

/** What a task's intake and writer asked of KV `workflows`, call by call. */
type Op = { op: 'get' | 'create' | 'update' | 'put'; record?: WorkflowRecord };

/** A delivered task triaged, claimed and given its writer, every KV call on its record counted. */
async function started(
  options: { deliveryCount?: number; steering?: TaskSteering; before?: WorkflowRecord } = {},
) {
  const setup = intakeServices({ config: core });
  const { services, store } = setup;
  if (options.before) await store.create('task-1', options.before);
  const ops: Op[] = [];
  const { get, create, update, put } = {
    get: store.get.bind(store),
    create: store.create.bind(store),
    update: store.update.bind(store),
    put: store.put.bind(store),
  };
  store.get = (key) => {
    ops.push({ op: 'get' });
    return get(key);
  };
  store.create = (key, value) => {
    ops.push({ op: 'create', record: value });
    return create(key, value);
  };
  store.update = (key, value, revision) => {
    ops.push({ op: 'update', record: value });
    return update(key, value, revision);
  };
  store.put = (key, value) => {
    ops.push({ op: 'put', record: value });
    return put(key, value);
  };
  const triaged = await triage(
    services,
    deliveryOf({ id: 'task-1', goal: 'plan it' }, { deliveryCount: options.deliveryCount ?? 1 }),
  );
  if (triaged.next !== 'claim') throw new Error(`triaged as ${triaged.next}`);
  const claimed = await claim(services, triaged.task);
  if (claimed.next !== 'run') throw new Error(`claimed as ${claimed.next}`);
  const resumed: boolean[] = [];
  const writer = new CheckpointWriter(
    services,
    claimed.claimed,
    claimed.flow,
    () => {},
    (_snapshot, taken) => resumed.push(taken.resumed),
    options.steering,
  );
  const first: WorkflowSnapshot = createActor(claimed.flow.machine, {
    input: claimed.claimed.input,
  }).getSnapshot();
  /** The workflow's snapshot in step `step`, as it would be once the step before replied. */
  const inStep = (step: string) =>
    claimed.flow.machine.resolveState({ value: step, context: first.context }) as WorkflowSnapshot;
  const done = {
    ...first,
    status: 'done',
    output: {
      status: 'completed',
      output: 'reviewed',
      approved: true,
      rounds: 1,
      usage: first.context.usage,
      usageByAgent: {},
    },
  } as WorkflowSnapshot;
  return { ...setup, ops, writer, first, inStep, done, claimed: claimed.claimed, resumed };
}

describe("a new task's first checkpoint", () => {
  it('is not written: the claim names the first step at work, and the task reads nothing and writes once per step after it', async () => {
    const { ops, writer, first, inStep, done, store, resumed } = await started();
    expect(ops).toEqual([{ op: 'create', record: expect.anything() }]);
    expect(ops[0]?.record).toMatchObject({
      status: 'running',
      state: 'plan',
      progress: 0,
      activity: { kind: 'agent', step: 'plan', agent: 'planner' },
    });
    writer.snapshot(first);
    // The first heartbeat says what the claim did: nothing more to write either.
    writer.activity({ kind: 'agent', step: 'plan', agent: 'planner', since: '2026-01-01T00:00:01.000Z' });
    expect(ops).toHaveLength(1);
    // Each step ends a while after the one before (snapshots of one turn are written as one record).
    writer.snapshot(inStep('execute'));
    expect(await writer.stored()).toBe(true);
    writer.snapshot(inStep('review'));
    expect(await writer.stored()).toBe(true);
    writer.snapshot(done);
    const written = await writer.written();
    // One create and one update per step after the first, the last the final record; no read at all.
    expect(ops.map((o) => o.op)).toEqual(['create', 'update', 'update', 'update']);
    expect(ops.slice(1).map((o) => [o.record?.status, o.record?.state, o.record?.progress])).toEqual([
      ['running', 'execute', 1],
      ['running', 'review', 2],
      ['completed', expect.any(String), 3],
    ]);
    expect(ops[1]?.record?.snapshot).toBeDefined();
    expect(written).toMatchObject({ finalWritten: true, lost: false, progress: 3 });
    expect((await store.get('task-1'))?.value).toMatchObject({
      status: 'completed',
      final: { kind: 'task.completed' },
    });
    expect(resumed).toEqual([false, false, false, false]);
  });

  it('is written at once when people paused the task before it, holding the pause', async () => {
    const steering = new TaskSteering();
    const { ops, writer, first } = await started({ steering });
    steering.pause(Date.parse('2026-01-01T00:00:00.000Z'), 'ann', 'wrong way');
    const answered = writer.steered();
    writer.snapshot(first);
    expect(await answered).toBe(true);
    expect(ops.map((o) => o.op)).toEqual(['create', 'update']);
    expect(ops[1]?.record).toMatchObject({ state: 'plan', progress: 0, paused: { by: 'ann' } });
    expect(ops[1]?.record?.snapshot).toBeDefined();
  });

  it('leaves a pause made in the first step to be written at once, with the snapshot the claim did not write', async () => {
    const steering = new TaskSteering();
    const { ops, writer, first } = await started({ steering });
    writer.snapshot(first);
    expect(ops).toHaveLength(1);
    steering.pause(Date.parse('2026-01-01T00:00:00.000Z'), 'ann', 'wrong way');
    expect(await writer.steered()).toBe(true);
    expect(ops.map((o) => o.op)).toEqual(['create', 'update']);
    expect(ops[1]?.record).toMatchObject({ state: 'plan', progress: 0, paused: { by: 'ann' } });
    expect(ops[1]?.record?.snapshot).toBeDefined();
  });

  it('is written when the task is let go in its first step (a stop), so the next run restores the step in flight', async () => {
    const { ops, writer, first } = await started();
    writer.snapshot(first);
    expect(ops).toHaveLength(1);
    const written = await writer.written();
    expect(ops.map((o) => o.op)).toEqual(['create', 'update']);
    expect(ops[1]?.record).toMatchObject({ state: 'plan', progress: 0 });
    expect(ops[1]?.record?.snapshot).toBeDefined();
    expect(written).toMatchObject({ lost: false, finalWritten: false, progress: 0 });
  });

  it('is not written either when a later delivery resumes the task from its claim record, which it says is resumed', async () => {
    const first = await started();
    const record = (await first.store.get('task-1'))?.value;
    if (!record) throw new Error('no record');
    // The first coordinator died in the first step: its record is the claim's, with no snapshot.
    const {
      ops,
      writer,
      first: snapshot,
      claimed,
      resumed,
    } = await started({ deliveryCount: 2, before: record });
    expect(claimed).toMatchObject({ firstDelivery: false, resumes: true, snapshot: undefined });
    // In the trace the first run began: its claim's record kept it.
    expect(claimed.input.traceparent).toBe(first.claimed.input.traceparent);
    expect(record.traceparent).toBe(first.claimed.input.traceparent);
    expect(ops.map((o) => o.op)).toEqual(['get', 'update']);
    writer.snapshot(snapshot);
    expect(ops).toHaveLength(2);
    expect(resumed).toEqual([true]);
  });
});
