import {
  AgentStepRequest,
  ControlReceipt,
  type StepHeartbeat,
  subjects,
  type UsageTotals,
  WorkflowRecord,
} from '@troupe/protocol';
import { type Clock, createLogger, type Delivery } from '@troupe/runtime';
import { MemoryBus, MemoryKv, SimulatedClock } from '@troupe/testkit';
import { afterEach, describe, expect, it } from 'vitest';
import { PipelineConfig } from '../../src/config/pipelineSchema.ts';
import { CheckpointWriter } from '../../src/task/checkpointWriter.ts';
import { PassivatedCopies } from '../../src/task/passivatedCopies.ts';
import { AWAKE_WAITING_MAX, CROWD_MIN_WAIT_MS, PASSIVATIONS_PER_SWEEP } from '../../src/task/passivation.ts';
import { type PipelineRunner, startPipelineRunner } from '../../src/workflow/pipelineRunner.ts';
import { SendsInFlight } from '../../src/workflow/sendsInFlight.ts';
import { MemoryTaskIntake } from '../memoryTaskIntake.ts';
import { timePasser } from '../support/passTime.ts';

const usage: UsageTotals = { inputTokens: 2, outputTokens: 1, cachedTokens: 0, costUsd: 0, modelCalls: 1 };
const HEARTBEAT_MS = 1_000;
const PASSIVATE_AFTER_MS = 2_000;

const config = PipelineConfig.parse({
  version: 1,
  name: 'unit',
  models: { scripted: { provider: 'scripted', script: './unit.script.yaml' } },
  defaults: { model: 'scripted' },
  agents: {
    planner: { instructions: 'Plan.' },
    executor: { instructions: 'Do.' },
    worker: { instructions: 'Work.' },
  },
  flow: [
    { id: 'plan', kind: 'agent', agent: 'planner' },
    { id: 'execute', kind: 'agent', agent: 'executor', timeout: 60 },
  ],
});
/** The same, with a step after the executor's whose worker works (reports, not waiting) for 20 s. */
const withWork = PipelineConfig.parse({
  ...config,
  flow: [...config.flow, { id: 'work', kind: 'agent', agent: 'worker', timeout: 120 }],
});
const WORK_MS = 20_000;

/** A step the executor holds: it says it waits on its model, keeps reporting so, and answers when told. */
interface HeldStep {
  delivery: Delivery<AgentStepRequest>;
  reply(output?: string): void;
  /** Stops its reports (its host went silent). */
  silence(): void;
}

/**
 * A pipeline runner on an in-memory bus, KV bucket and task intake, on a simulated clock: the planner answers at
 * once, the executor holds its step (waiting on its model) until the test answers. Passivation after 2 s, off when
 * `live`, after the runner's default when `byDefault`.
 */
async function setUp(
  options: { live?: boolean; byDefault?: boolean; work?: boolean; watchJumps?: number[] } = {},
) {
  const clock = new SimulatedClock();
  const bus = new MemoryBus({ clock });
  const store = new MemoryKv(WorkflowRecord);
  const intake = new MemoryTaskIntake();
  const steps: AgentStepRequest[] = [];
  const held: HeldStep[] = [];
  const writes: WorkflowRecord[] = [];
  const update = store.update.bind(store);
  store.update = (key, value, revision) => {
    writes.push(value);
    return update(key, value, revision);
  };
  bus.subscribe(subjects.agent('unit', 'planner'), AgentStepRequest, (delivery) => {
    steps.push(delivery.value);
    delivery.respond({ ok: true, stepId: delivery.value.stepId, output: 'a plan', usage, turns: 1 });
  });
  bus.subscribe(subjects.agent('unit', 'executor'), AgentStepRequest, (delivery) => {
    steps.push(delivery.value);
    const beat = () =>
      bus.publish(delivery.reply as string, {
        stepId: delivery.value.stepId,
        heartbeat: true,
        waitingOnModel: true,
      } satisfies StepHeartbeat);
    beat();
    let timer: unknown;
    const every = () => {
      timer = clock.setTimeout(() => {
        beat();
        every();
      }, HEARTBEAT_MS);
    };
    every();
    held.push({
      delivery,
      reply: (output = 'done it') => {
        clock.clearTimeout(timer);
        delivery.respond({ ok: true, stepId: delivery.value.stepId, output, usage, turns: 1 });
      },
      silence: () => clock.clearTimeout(timer),
    });
  });
  bus.subscribe(subjects.agent('unit', 'worker'), AgentStepRequest, (delivery) => {
    steps.push(delivery.value);
    const { stepId } = delivery.value;
    const beat = () =>
      bus.publish(delivery.reply as string, { stepId, heartbeat: true } satisfies StepHeartbeat);
    beat();
    const started = clock.now();
    const every = () =>
      clock.setTimeout(() => {
        if (clock.now() - started < WORK_MS) {
          beat();
          every();
        } else delivery.respond({ ok: true, stepId, output: 'worked', usage, turns: 1 });
      }, HEARTBEAT_MS);
    every();
  });
  const runner = await startPipelineRunner({
    bus,
    intake,
    config: options.work ? withWork : config,
    store,
    logger: createLogger({ level: 'silent' }),
    clock: options.watchJumps ? jumpsOf(clock, () => runner, options.watchJumps) : clock,
    concurrency: 4,
    stepHeartbeatMs: HEARTBEAT_MS,
    ...(options.byDefault ? {} : { passivateAfterMs: options.live ? 0 : PASSIVATE_AFTER_MS }),
  });
  running.push(runner);
  const pass = timePasser(bus, clock);
  const events = (taskId: string) => bus.events.filter((e) => e.taskId === taskId);
  const control = (taskId: string, message: Record<string, unknown>) =>
    bus.request(subjects.control(taskId), message, ControlReceipt, { timeoutMs: 1_000 });
  return { clock, bus, store, intake, steps, held, writes, runner, pass, events, control };
}

/**
 * The runner's clock, noting how many tasks each of its timers' callbacks passivated (`jumps`): what one turn of the
 * event loop did.
 */
function jumpsOf(clock: SimulatedClock, runner: () => PipelineRunner | undefined, jumps: number[]): Clock {
  return {
    now: () => clock.now(),
    clearTimeout: (handle) => clock.clearTimeout(handle),
    setTimeout: (fn, ms) =>
      clock.setTimeout(() => {
        const before = runner()?.passivated() ?? 0;
        fn();
        jumps.push((runner()?.passivated() ?? 0) - before);
      }, ms),
  };
}

const running: PipelineRunner[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((runner) => runner.stop()));
});

/** A record as two runs of one task on the same clock write it alike: without its lease token, event ids and traces. */
const comparable = ({ lease: _lease, final, ...record }: WorkflowRecord): unknown =>
  JSON.parse(
    JSON.stringify({ ...record, final: final && { kind: final.kind, data: final.data } }).replace(
      /00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]/g,
      'traceparent',
    ),
  );

/** Runs one task whose executor answers 10 s in; returns what it published and wrote. */
async function runOnce(live: boolean) {
  const setup = await setUp({ live });
  const task = setup.intake.deliver({ id: 'task-1', goal: 'wait on the model' });
  await setup.pass(500);
  const passivatedMidway: number[] = [];
  await setup.pass(4_500);
  passivatedMidway.push(setup.runner.passivated());
  await setup.pass(5_000);
  setup.held[0]?.reply();
  await task.handled;
  await setup.bus.settled();
  return { ...setup, task, passivatedMidway };
}

/** Runs one task told a message 5 s in, whose executor answers 10 s later; returns what it published and wrote. */
async function tellOnce(live: boolean) {
  const setup = await setUp({ live });
  const task = setup.intake.deliver({ id: 'task-1', goal: 'wait on the model' });
  await setup.pass(5_000);
  const passivated = setup.runner.passivated();
  const told = setup.control('task-1', { action: 'tell', text: 'mind the tests', key: 'k-1' });
  await setup.pass(0);
  await told;
  await setup.pass(10_000);
  setup.held[0]?.reply();
  await task.handled;
  await setup.bus.settled();
  return { ...setup, passivated };
}

/** The runner's sends in flight, caught as the first task's send starts (to see a woken task's sends stopped). */
function catchSends(): { sends: () => SendsInFlight | undefined; restore: () => void } {
  let sends: SendsInFlight | undefined;
  const start = SendsInFlight.prototype.start;
  SendsInFlight.prototype.start = function (this: SendsInFlight, ...args: Parameters<typeof start>) {
    sends = this;
    return start.apply(this, args);
  };
  return {
    sends: () => sends,
    restore: () => {
      SendsInFlight.prototype.start = start;
    },
  };
}

describe('passivation of a task that waits on its model', () => {
  it('stops its tree while it waits, and wakes on the reply to end as a live task does: same events, records, one run of the step', async () => {
    const live = await runOnce(true);
    const passive = await runOnce(false);
    expect(live.passivatedMidway).toEqual([0]);
    expect(passive.passivatedMidway).toEqual([1]);
    expect(passive.runner.passivated()).toBe(0);
    // The executor got its step once: the woken call adopted the send under way rather than send it again.
    expect(passive.steps.map((s) => s.stepId)).toEqual(['task-1.plan.1', 'task-1.execute.1']);
    const shape = (setup: typeof live) =>
      setup.events('task-1').map((e) => ({ kind: e.kind, data: e.data, at: e.ts, from: e.from, to: e.to }));
    expect(shape(passive)).toEqual(shape(live));
    expect(passive.writes.map(comparable)).toEqual(live.writes.map(comparable));
    expect(comparable((await passive.store.get('task-1'))?.value as WorkflowRecord)).toEqual(
      comparable((await live.store.get('task-1'))?.value as WorkflowRecord),
    );
    expect(passive.task.settlement()).toEqual({ kind: 'ack' });
    // Its message was kept alive while it slept, as the live task's was.
    expect(passive.task.keepAlives()).toBe(live.task.keepAlives());
  });

  it('passivates a crowd that began to wait together a batch at a time, letting the event loop go between batches', async () => {
    const jumps: number[] = [];
    const setup = await setUp({ watchJumps: jumps });
    const crowd = PASSIVATIONS_PER_SWEEP * 2 + 50;
    for (let n = 0; n < crowd; n++) setup.intake.deliver({ id: `crowd-${n}`, goal: 'wait on the model' });
    await setup.pass(500);
    expect(setup.held).toHaveLength(crowd);
    await setup.pass(PASSIVATE_AFTER_MS * 3);
    expect(setup.runner.passivated()).toBe(crowd);
    expect(Math.max(...jumps)).toBe(PASSIVATIONS_PER_SWEEP);
  });

  it('passivates the longest waiting beyond the most left awake after 1 s, the rest after the runner’s threshold', async () => {
    const setup = await setUp();
    const crowd = AWAKE_WAITING_MAX + 50;
    for (let n = 0; n < crowd; n++) setup.intake.deliver({ id: `many-${n}`, goal: 'wait on the model' });
    await setup.pass(500);
    expect(setup.held).toHaveLength(crowd);
    expect(setup.runner.passivated()).toBe(0);
    // Past CROWD_MIN_WAIT_MS of waiting, not yet PASSIVATE_AFTER_MS: only those beyond the most left awake.
    await setup.pass(CROWD_MIN_WAIT_MS);
    expect(setup.runner.passivated()).toBe(crowd - AWAKE_WAITING_MAX);
    await setup.pass(PASSIVATE_AFTER_MS);
    expect(setup.runner.passivated()).toBe(crowd);
  });

  it('leaves a few tasks that wait awake until the runner’s threshold', async () => {
    const setup = await setUp();
    for (let n = 0; n < 3; n++) setup.intake.deliver({ id: `few-${n}`, goal: 'wait on the model' });
    await setup.pass(PASSIVATE_AFTER_MS - 200);
    expect(setup.held).toHaveLength(3);
    expect(setup.runner.passivated()).toBe(0);
    await setup.pass(PASSIVATE_AFTER_MS);
    expect(setup.runner.passivated()).toBe(3);
  });

  it('keeps a woken task alive an interval after its last keep-alive while it slept, not an interval after its waking', async () => {
    // The runner's keep-alive interval: a third of its ack wait (30 s by default).
    const KEEP_ALIVE_MS = 10_000;
    const { intake, pass, runner, held, clock } = await setUp({ work: true });
    const task = intake.deliver({ id: 'task-gap', goal: 'wait, then work' });
    const keptAt: number[] = [];
    let count = task.keepAlives();
    /** Lets time pass, noting when the task's message is kept alive. */
    const watch = async (ms: number) => {
      for (let passed = 0; passed < ms; passed += 100) {
        await pass(100);
        if (task.keepAlives() !== count) {
          count = task.keepAlives();
          keptAt.push(clock.now());
        }
      }
    };
    await watch(5_000);
    expect(runner.passivated()).toBe(1);
    // A keep-alive while it sleeps; the reply wakes it just before the next is due, and its next step works on.
    const before = keptAt.length;
    while (keptAt.length === before) await watch(100);
    await watch(KEEP_ALIVE_MS - 300);
    expect(runner.passivated()).toBe(1);
    held[0]?.reply();
    await watch(WORK_MS + 5_000);
    await task.handled;
    expect(task.settlement()).toEqual({ kind: 'ack' });
    const gaps = keptAt.slice(1).map((at, i) => at - (keptAt[i] as number));
    // As a live task's: an interval (give or take the sweep's tick while it slept), never two.
    expect(Math.max(...gaps)).toBeLessThanOrEqual(KEEP_ALIVE_MS + 1_000);
  });

  it('is on by default, after 5 s of waiting', async () => {
    const { intake, pass, runner, held } = await setUp({ byDefault: true });
    const task = intake.deliver({ id: 'task-5s', goal: 'wait' });
    await pass(4_500);
    expect(runner.passivated()).toBe(0);
    await pass(3_500);
    expect(runner.passivated()).toBe(1);
    held[0]?.reply();
    await task.handled;
    expect(task.settlement()).toEqual({ kind: 'ack' });
  });

  it('refuses a threshold that is no number of milliseconds', async () => {
    await expect(
      startPipelineRunner({
        bus: new MemoryBus(),
        intake: new MemoryTaskIntake(),
        config,
        store: new MemoryKv(WorkflowRecord),
        logger: createLogger({ level: 'silent' }),
        clock: new SimulatedClock(),
        concurrency: 1,
        passivateAfterMs: -1,
      }),
    ).rejects.toThrow(
      'passivateAfterMs must be 0 (passivation off) or a number of milliseconds above 0, not -1',
    );
  });

  it('wakes on a cancel: answers it, cancels the task, and acks it', async () => {
    const { intake, pass, runner, control, store, events } = await setUp();
    const task = intake.deliver({ id: 'task-c', goal: 'cancel me' });
    await pass(5_000);
    expect(runner.passivated()).toBe(1);
    const receipt = control('task-c', { action: 'cancel', reason: 'changed my mind' });
    await pass(0);
    expect(await receipt).toEqual({ ok: true, taskId: 'task-c', outcome: 'cancelled' });
    await task.handled;
    expect(events('task-c').at(-1)).toMatchObject({
      kind: 'task.cancelled',
      data: { reason: 'changed my mind' },
    });
    expect((await store.get('task-c'))?.value.status).toBe('cancelled');
    expect(task.settlement()).toEqual({ kind: 'ack' });
  });

  it('answers a signal with a refusal when the task it woke cannot be restored', async () => {
    // The runner's sends in flight, to see the woken task's send stopped with it.
    let sends: SendsInFlight | undefined;
    const start = SendsInFlight.prototype.start;
    SendsInFlight.prototype.start = function (this: SendsInFlight, ...args: Parameters<typeof start>) {
      sends = this;
      return start.apply(this, args);
    };
    const setup = await setUp();
    const { intake, pass, runner, control } = setup;
    const task = intake.deliver({ id: 'task-f', goal: 'fail to wake' });
    await pass(5_000).finally(() => {
      SendsInFlight.prototype.start = start;
    });
    expect(sends?.size).toBe(1);
    expect(runner.passivated()).toBe(1);
    // A fault of ours as its tree is restored: the woken task actor fails as it starts.
    const reattach = CheckpointWriter.prototype.reattach;
    CheckpointWriter.prototype.reattach = () => {
      throw new Error('cannot take the writer back');
    };
    try {
      const paused = control('task-f', { action: 'pause', reason: 'a look' }).catch(
        (error: unknown) => error,
      );
      await pass(0);
      // Refused (the sender tries again), not left to time out.
      expect(await paused).toMatchObject({ code: 'not_running', message: expect.stringContaining('task-f') });
    } finally {
      CheckpointWriter.prototype.reattach = reattach;
    }
    await task.handled.catch(() => {});
    expect(runner.passivated()).toBe(0);
    // Its step's request, which no call adopted, is stopped rather than left to wait.
    expect(sends?.size).toBe(0);
  });

  it('refuses a signal and leaves its message to a redelivery, which resumes it, when what it kept cannot be read', async () => {
    const caught = catchSends();
    const { intake, pass, runner, control, store, held, steps } = await setUp();
    const task = intake.deliver({ id: 'task-u', goal: 'wake from a bad copy' });
    await pass(5_000).finally(caught.restore);
    expect(runner.passivated()).toBe(1);
    // Its copy is corrupt (zlib's checksum fails) as the pause wakes it.
    const unpack = PassivatedCopies.prototype.unpack;
    PassivatedCopies.prototype.unpack = () => {
      throw new Error('incorrect data check');
    };
    try {
      const paused = control('task-u', { action: 'pause' }).catch((error: unknown) => error);
      await pass(0);
      expect(await paused).toMatchObject({ code: 'not_running', message: expect.stringContaining('task-u') });
    } finally {
      PassivatedCopies.prototype.unpack = unpack;
    }
    await expect(task.handled).rejects.toThrow('cannot restore passivated task task-u here');
    expect(runner.passivated()).toBe(0);
    expect(caught.sends()?.size).toBe(0);
    // Not settled: the message is delivered again, and its record is as its last checkpoint left it.
    expect(task.settlement()).toBeUndefined();
    expect((await store.get('task-u'))?.value).toMatchObject({ status: 'running', state: 'execute' });
    const again = intake.deliver(
      { id: 'task-u', goal: 'wake from a bad copy' },
      { streamSequence: task.delivery.streamSequence, deliveryCount: 2 },
    );
    await pass(1_000);
    expect(held).toHaveLength(2);
    held[1]?.reply();
    await again.handled;
    expect((await store.get('task-u'))?.value.status).toBe('completed');
    expect(steps.filter((s) => s.agent === 'executor').map((s) => s.stepId)).toEqual([
      'task-u.execute.1',
      'task-u.execute.1',
    ]);
    expect(again.settlement()).toEqual({ kind: 'ack' });
  });

  it('wakes on a pause and a resume, recording each, and completes on the reply with the step sent once', async () => {
    const { intake, pass, runner, control, store, held, steps } = await setUp();
    const task = intake.deliver({ id: 'task-p', goal: 'pause me' });
    await pass(5_000);
    expect(runner.passivated()).toBe(1);
    const paused = control('task-p', { action: 'pause', reason: 'a look' });
    await pass(0);
    expect(await paused).toMatchObject({ ok: true, taskId: 'task-p' });
    expect((await store.get('task-p'))?.value.paused).toMatchObject({ reason: 'a look' });
    await pass(5_000);
    const resumed = control('task-p', { action: 'resume' });
    await pass(0);
    expect(await resumed).toMatchObject({ ok: true, taskId: 'task-p' });
    expect((await store.get('task-p'))?.value.paused).toBeUndefined();
    held[0]?.reply();
    await task.handled;
    expect((await store.get('task-p'))?.value.status).toBe('completed');
    expect(steps.filter((s) => s.agent === 'executor')).toHaveLength(1);
    expect(task.settlement()).toEqual({ kind: 'ack' });
  });

  it('wakes on a tell: the message is recorded and answered, and the task, still waiting, sleeps again', async () => {
    const { intake, pass, runner, control, store, held, steps } = await setUp();
    const task = intake.deliver({ id: 'task-t', goal: 'tell me' });
    await pass(5_000);
    expect(runner.passivated()).toBe(1);
    const told = control('task-t', { action: 'tell', text: 'mind the tests' });
    await pass(0);
    expect(await told).toMatchObject({ ok: true, taskId: 'task-t' });
    expect((await store.get('task-t'))?.value.told).toEqual([
      expect.objectContaining({ text: 'mind the tests' }),
    ]);
    expect(runner.passivated()).toBe(0);
    await pass(5_000);
    expect(runner.passivated()).toBe(1);
    held[0]?.reply();
    await task.handled;
    expect((await store.get('task-t'))?.value.status).toBe('completed');
    expect(steps.filter((s) => s.agent === 'executor')).toHaveLength(1);
  });

  it('writes and publishes the same for a tell while it sleeps as a live task does', async () => {
    const live = await tellOnce(true);
    const passive = await tellOnce(false);
    expect([live.passivated, passive.passivated]).toEqual([0, 1]);
    const shape = (setup: typeof live) =>
      setup.events('task-1').map((e) => ({ kind: e.kind, data: e.data, at: e.ts, from: e.from, to: e.to }));
    expect(shape(passive)).toEqual(shape(live));
    expect(passive.writes.map(comparable)).toEqual(live.writes.map(comparable));
    expect(passive.writes.some((record) => record.told?.[0]?.text === 'mind the tests')).toBe(true);
    expect(passive.steps.filter((s) => s.agent === 'executor')).toHaveLength(1);
  });

  it('wakes on a reconnect and sends the step again, as a live task does (the reply in flight may be lost)', async () => {
    const { intake, pass, runner, bus, held, steps, store } = await setUp();
    const task = intake.deliver({ id: 'task-r', goal: 'reconnect' });
    await pass(5_000);
    expect(runner.passivated()).toBe(1);
    bus.emitStatus('reconnect');
    await pass(100);
    expect(runner.passivated()).toBe(0);
    expect(steps.filter((s) => s.agent === 'executor').map((s) => s.stepId)).toEqual([
      'task-r.execute.1',
      'task-r.execute.1',
    ]);
    held[1]?.reply();
    await task.handled;
    expect((await store.get('task-r'))?.value.status).toBe('completed');
  });

  it('wakes at the step’s deadline: the step times out as a live one does', async () => {
    const { intake, pass, runner, store, held } = await setUp();
    const task = intake.deliver({ id: 'task-d', goal: 'run out of time' });
    await pass(5_000);
    expect(runner.passivated()).toBe(1);
    held[0]?.silence();
    // The host goes silent: three missed heartbeats and the step goes to another worker, which the test leaves
    // silent too, until the step's 60 s are spent.
    await pass(70_000, 500);
    await task.handled;
    const record = (await store.get('task-d'))?.value;
    expect(record?.status).toBe('failed');
    expect(task.settlement()).toEqual({ kind: 'ack' });
  });

  it('is handed back at the runner’s stop, its record left running to be resumed elsewhere', async () => {
    const { intake, pass, runner, store } = await setUp();
    const task = intake.deliver({ id: 'task-s', goal: 'interrupted' });
    await pass(5_000);
    expect(runner.passivated()).toBe(1);
    await runner.stop();
    await task.handled;
    expect(task.settlement()).toMatchObject({ kind: 'nak' });
    expect((await store.get('task-s'))?.value).toMatchObject({
      status: 'running',
      state: 'execute',
      delivery: expect.objectContaining({ handedBack: true }),
    });
  });
});
