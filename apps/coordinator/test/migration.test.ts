import {
  AgentStepRequest,
  ControlReceipt,
  subjects,
  type UsageTotals,
  WorkflowRecord,
} from '@troupe/protocol';
import { createLogger, TransportError } from '@troupe/runtime';
import { MemoryBus, MemoryKv, SimulatedClock } from '@troupe/testkit';
import { afterEach, describe, expect, it } from 'vitest';
import { PipelineConfig } from '../src/config/pipelineSchema.ts';
import { versionHash } from '../src/config/pipelineVersion.ts';
import { startControlResponder } from '../src/control/controlResponder.ts';
import type { WorkflowStore } from '../src/task/taskServices.ts';
import { type PipelineRunner, startPipelineRunner } from '../src/workflow/pipelineRunner.ts';
import { MemoryTaskIntake } from './memoryTaskIntake.ts';

const usage: UsageTotals = { inputTokens: 1, outputTokens: 1, cachedTokens: 0, costUsd: 0, modelCalls: 1 };

const base = {
  version: 1,
  name: 'unit',
  models: { scripted: { provider: 'scripted', script: './unit.script.yaml' } },
  defaults: { model: 'scripted' },
  agents: {
    planner: { instructions: 'Plan.' },
    executor: { instructions: 'Do.' },
    polisher: { instructions: 'Polish.' },
  },
};
const plan = { id: 'plan', kind: 'agent', agent: 'planner' };
const execute = { id: 'execute', kind: 'agent', agent: 'executor' };
const v1 = PipelineConfig.parse({ ...base, flow: [plan, execute] });
/** A step added after the one the task is in: its state fits. */
const added = PipelineConfig.parse({
  ...base,
  flow: [plan, execute, { id: 'polish', kind: 'agent', agent: 'polisher' }],
});
/** The step the task is in removed: its state does not fit. */
const removed = PipelineConfig.parse({
  ...base,
  flow: [plan, { id: 'polish', kind: 'agent', agent: 'polisher' }],
});
/** A step the task has done defined otherwise. */
const redone = PipelineConfig.parse({ ...base, flow: [{ ...plan, agent: 'polisher' }, execute] });
const configs = new Map([v1, added, removed, redone].map((config) => [versionHash(config, {}), config]));
const hashOf = (config: PipelineConfig) => versionHash(config, {});

const running: PipelineRunner[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((runner) => runner.stop()));
});

/** A runner of v1 with a task held in its `execute` step (the executor does not answer until told). */
async function taskInExecute() {
  const clock = new SimulatedClock();
  const bus = new MemoryBus({ clock });
  const store = new MemoryKv(WorkflowRecord);
  // Writes wait while a test holds them back (a slow KV, as under load): reads do not.
  let writes: Promise<void> = Promise.resolve();
  const slowStore: WorkflowStore = {
    get: (key) => store.get(key),
    create: (key, value) => writes.then(() => store.create(key, value)),
    update: (key, value, revision) => writes.then(() => store.update(key, value, revision)),
  };
  const holdWrites = (): (() => void) => {
    let open: () => void = () => {};
    writes = new Promise<void>((resolve) => (open = resolve));
    return open;
  };
  let loads: Promise<void> = Promise.resolve();
  const holdLoads = (): (() => void) => {
    let open: () => void = () => {};
    loads = new Promise<void>((resolve) => (open = resolve));
    return open;
  };
  const steps: AgentStepRequest[] = [];
  let holding = true;
  let arrived: () => void = () => {};
  const inExecute = new Promise<void>((resolve) => (arrived = resolve));
  for (const agent of ['planner', 'executor', 'polisher']) {
    bus.subscribe(subjects.agent('unit', agent), AgentStepRequest, (delivery) => {
      steps.push(delivery.value);
      if (agent === 'executor' && holding) return arrived();
      delivery.respond({
        ok: true,
        stepId: delivery.value.stepId,
        output: `${agent} did it`,
        usage,
        turns: 1,
      });
    });
  }
  const start = (intake: MemoryTaskIntake) =>
    startPipelineRunner({
      bus,
      clock,
      store: slowStore,
      intake,
      config: v1,
      version: hashOf(v1),
      loadVersion: (hash) => loads.then(() => configs.get(hash)),
      versionHashes: async () => [...configs.keys()],
      logger: createLogger({ level: 'silent' }),
      concurrency: 4,
    }).then((runner) => {
      running.push(runner);
      return runner;
    });
  const intake = new MemoryTaskIntake();
  await start(intake);
  const task = intake.deliver({ id: 'task-m', goal: 'move me' });
  await inExecute;
  await expect.poll(async () => (await store.get('task-m'))?.value.state).toBe('execute');
  const migrate = (to?: string) =>
    bus.request(
      subjects.control('task-m'),
      { action: 'migrate', ...(to === undefined ? {} : { to }) },
      ControlReceipt,
      { timeoutMs: 1_000 },
    );
  const release = () => {
    holding = false;
  };
  return { bus, clock, store, steps, task, migrate, release, start, holdWrites, holdLoads };
}

describe('troupe migrate, at the coordinator running the task', () => {
  it('moves a task whose state fits: handed back, it resumes on the new version with no step run again', async () => {
    const { store, steps, task, migrate, release, start } = await taskInExecute();
    const receipt = await migrate(hashOf(added).slice(0, 8));
    expect(receipt).toEqual({
      ok: true,
      taskId: 'task-m',
      outcome: 'migrated',
      from: hashOf(v1),
      to: hashOf(added),
    });
    await task.handled;
    expect(task.settlement()).toMatchObject({ kind: 'nak' });
    expect((await store.get('task-m'))?.value).toMatchObject({ status: 'running', version: hashOf(added) });

    release();
    const again = new MemoryTaskIntake();
    await start(again);
    await again.deliver(
      { id: 'task-m', goal: 'move me' },
      { streamSequence: task.delivery.streamSequence, deliveryCount: 2 },
    ).handled;
    // The step it was in is sent again (same id, so its host joins or replays it); the done one is not; the added one runs.
    expect(steps.map((s) => s.stepId)).toEqual([
      'task-m.plan.1',
      'task-m.execute.1',
      'task-m.execute.1',
      'task-m.polish.1',
    ]);
    expect(steps.slice(2).map((s) => s.version)).toEqual([hashOf(added), hashOf(added)]);
    expect((await store.get('task-m'))?.value).toMatchObject({ status: 'completed', version: hashOf(added) });
  });

  it('refuses, saying why and changing nothing, when the step it is in is gone or a step it did changed', async () => {
    const { store, migrate, task, release } = await taskInExecute();
    const refusal = (to: string) =>
      migrate(to).then(
        () => undefined,
        (error: unknown) => error as TransportError,
      );
    const gone = await refusal(hashOf(removed));
    expect(gone).toBeInstanceOf(TransportError);
    expect(gone?.code).toBe('not_migratable');
    expect(gone?.message).toContain('its checkpoint does not fit the version asked for');
    const changed = await refusal(hashOf(redone));
    expect(changed?.code).toBe('not_migratable');
    expect(changed?.message).toContain('step plan, which the task has done, is defined otherwise');
    expect((await refusal('ffff'))?.code).toBe('unknown_version');
    expect((await refusal(hashOf(v1)))?.message).toContain('already');
    // Still running here, on its own version.
    expect(task.settlement()).toBeUndefined();
    expect((await store.get('task-m'))?.value).toMatchObject({ status: 'running', version: hashOf(v1) });
    release();
  });

  it('is answered by the coordinator running the task, not by the control responder of another one, however slow the record write', async () => {
    const { bus, store, task, migrate, release, holdWrites } = await taskInExecute();
    // A second coordinator, running none of it: its responder answers a task nobody seems to run after its grace.
    const other = startControlResponder({ bus, store, runsHere: () => false, ownerGraceMs: 10 });
    const open = holdWrites();
    try {
      const receipt = await migrate(hashOf(added));
      expect(receipt).toMatchObject({ ok: true, outcome: 'migrated', from: hashOf(v1), to: hashOf(added) });
      open();
      await task.handled;
      expect(task.settlement()).toMatchObject({ kind: 'nak' });
      expect((await store.get('task-m'))?.value).toMatchObject({ status: 'running', version: hashOf(added) });
    } finally {
      open();
      other.unsubscribe();
      release();
    }
  });

  it('says "ask again" before the grace of the control responder is up while the version asked for is still being read', async () => {
    const { bus, clock, store, task, migrate, release, holdLoads } = await taskInExecute();
    const other = startControlResponder({ bus, store, runsHere: () => false, ownerGraceMs: 60_000 });
    const open = holdLoads();
    try {
      const first = migrate(hashOf(added)).then(
        () => undefined,
        (error: unknown) => error as TransportError,
      );
      // Once the migration waits on its timer, 500 ms of test time pass.
      await expect.poll(() => clock.pending().length).toBeGreaterThan(0);
      clock.advance(500);
      const slow = await first;
      expect(slow?.code).toBe('not_migratable');
      expect(slow?.message).toContain('still being read; ask again in a moment; nothing was changed');
      expect((await store.get('task-m'))?.value).toMatchObject({ status: 'running', version: hashOf(v1) });
      open();
      expect(await migrate(hashOf(added))).toMatchObject({
        ok: true,
        outcome: 'migrated',
        to: hashOf(added),
      });
      await task.handled;
    } finally {
      open();
      other.unsubscribe();
      release();
    }
  });
});
