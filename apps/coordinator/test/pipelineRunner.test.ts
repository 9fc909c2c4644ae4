import {
  AgentStepRequest,
  ControlReceipt,
  InvalidMessageEvent,
  subjects,
  type TroupeEvent,
  type UsageTotals,
  WorkflowRecord,
} from '@troupe/protocol';
import { createLogger, type Delivery, type ValueStore, ValueStoreError } from '@troupe/runtime';
import { MemoryBus, MemoryKv, SimulatedClock } from '@troupe/testkit';
import { afterEach, describe, expect, it } from 'vitest';
import { PipelineConfig } from '../src/config/pipelineSchema.ts';
import { type PipelineRunner, startPipelineRunner } from '../src/workflow/pipelineRunner.ts';
import { MemoryTaskIntake } from './memoryTaskIntake.ts';

const usage: UsageTotals = { inputTokens: 2, outputTokens: 1, cachedTokens: 0, costUsd: 0, modelCalls: 1 };

const config = PipelineConfig.parse({
  version: 1,
  name: 'unit',
  models: { scripted: { provider: 'scripted', script: './unit.script.yaml' } },
  defaults: { model: 'scripted' },
  agents: { planner: { instructions: 'Plan.' }, executor: { instructions: 'Do.' } },
  flow: [
    { id: 'plan', kind: 'agent', agent: 'planner' },
    { id: 'execute', kind: 'agent', agent: 'executor' },
  ],
});

type StepHandler = (delivery: Delivery<AgentStepRequest>) => void;

/**
 * A pipeline runner on an in-memory bus, KV bucket and task intake, with agents played by the test: each agent
 * answers its steps with `answer`, unless the test gives it a handler of its own.
 */
async function setUp(
  options: { maxDeliver?: number; values?: Pick<ValueStore, 'read'>; concurrency?: number } = {},
) {
  const clock = new SimulatedClock();
  const bus = new MemoryBus({ clock });
  const store = new MemoryKv(WorkflowRecord);
  const intake = new MemoryTaskIntake();
  const steps: AgentStepRequest[] = [];
  const handlers: Record<string, StepHandler> = {};
  const answer: StepHandler = (delivery) =>
    delivery.respond({
      ok: true,
      stepId: delivery.value.stepId,
      output: `${delivery.value.agent} did it`,
      usage,
      turns: 1,
    });
  for (const agent of ['planner', 'executor']) {
    bus.subscribe(subjects.agent('unit', agent), AgentStepRequest, (delivery) => {
      steps.push(delivery.value);
      (handlers[agent] ?? answer)(delivery);
    });
  }
  const runner = await startPipelineRunner({
    bus,
    intake,
    config,
    store,
    logger: createLogger({ level: 'silent' }),
    clock,
    concurrency: options.concurrency ?? 4,
    ...(options.maxDeliver === undefined ? {} : { maxDeliver: options.maxDeliver }),
    ...(options.values ? { values: options.values } : {}),
  });
  running.push(runner);
  const kinds = (taskId: string) => bus.events.filter((e) => e.taskId === taskId).map((e) => e.kind);
  return { clock, bus, store, intake, steps, handlers, runner, kinds };
}

const running: PipelineRunner[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((runner) => runner.stop()));
});

describe('the pipeline runner', () => {
  it('runs a task through its steps, stores its ending and final event, then acks it', async () => {
    const { intake, store, kinds, steps, bus } = await setUp();
    const task = intake.deliver({ id: 'task-1', goal: 'do the thing' });
    await task.handled;
    expect(steps.map((s) => s.stepId)).toEqual(['task-1.plan.1', 'task-1.execute.1']);
    expect(steps[1]?.context).toEqual([expect.objectContaining({ step: 'plan', output: 'planner did it' })]);
    expect(kinds('task-1')).toEqual([
      'task.accepted',
      'agent.handoff',
      'step.started',
      'step.completed',
      'agent.handoff',
      'step.started',
      'step.completed',
      'task.completed',
    ]);
    const record = (await store.get('task-1'))?.value;
    expect(record).toMatchObject({ status: 'completed', state: 'completed', progress: expect.any(Number) });
    expect(record?.final).toEqual(bus.eventsOf('task.completed')[0]);
    expect(record?.final?.data).toMatchObject({ output: 'executor did it' });
    expect(task.settlement()).toEqual({ kind: 'ack' });
  });

  it('sums the steps’ prompt cache reads and writes into the task’s usage, per agent, and its record', async () => {
    const { intake, store, handlers, bus } = await setUp();
    const spent = (cachedTokens: number, cacheWriteTokens?: number): UsageTotals => ({
      inputTokens: 1_200,
      outputTokens: 80,
      cachedTokens,
      ...(cacheWriteTokens === undefined ? {} : { cacheWriteTokens }),
      costUsd: 0.01,
      modelCalls: 2,
    });
    const answer = (usage: UsageTotals) => (delivery: Delivery<AgentStepRequest>) =>
      delivery.respond({ ok: true, stepId: delivery.value.stepId, output: 'done', usage, turns: 2 });
    handlers.planner = answer(spent(900, 1_250));
    // A host from before cache writes were counted says none.
    handlers.executor = answer(spent(1_000));
    await intake.deliver({ id: 'task-cache', goal: 'cache it' }).handled;
    const ended = bus.eventsOf('task.completed')[0]?.data;
    expect(ended?.usage).toEqual({
      inputTokens: 2_400,
      outputTokens: 160,
      cachedTokens: 1_900,
      cacheWriteTokens: 1_250,
      costUsd: 0.02,
      modelCalls: 4,
    });
    expect(ended?.usageByAgent.planner).toMatchObject({ cachedTokens: 900, cacheWriteTokens: 1_250 });
    expect(ended?.usageByAgent.executor).not.toHaveProperty('cacheWriteTokens');
    expect((await store.get('task-cache'))?.value.usage).toEqual(ended?.usage);
  });

  it('claims a task on its first delivery without reading its record first', async () => {
    const { intake, store } = await setUp();
    const reads: number[] = [];
    const create = store.create.bind(store);
    store.create = async (key, value) => {
      reads.push(store.gets);
      return create(key, value);
    };
    await intake.deliver({ id: 'task-fast', goal: 'new' }).handled;
    expect(reads).toEqual([0]);
  });

  it('fails the task with the step’s error when a step fails, and acks it', async () => {
    const { intake, handlers, bus } = await setUp();
    handlers.executor = (delivery) =>
      delivery.respond({
        ok: false,
        stepId: delivery.value.stepId,
        error: { code: 'budget_exceeded', message: 'over budget' },
        usage,
        turns: 1,
      });
    const task = intake.deliver({ id: 'task-2', goal: 'spend too much' });
    await task.handled;
    expect(bus.eventsOf('task.failed')[0]?.data).toMatchObject({
      reason: 'budget_exceeded',
      step: 'execute',
    });
    expect(task.settlement()).toEqual({ kind: 'ack' });
  });

  it('ends many tasks at once with no warning of a leak: each waits on the runner’s stop signal for its final event', async () => {
    // Each task's end listens on the runner's one stop signal while its final event is stored; Node warns of a leak
    // past 10 listeners on one signal, which a runner of 16 tasks ending at once (NATS slow to ack) went over.
    const { intake, bus } = await setUp({ concurrency: 16 });
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(`${warning.name}: ${warning.message}`);
    process.on('warning', onWarning);
    const publish = bus.publishEvent.bind(bus);
    const held: (() => void)[] = [];
    bus.publishEvent = (event) =>
      event.kind === 'task.completed'
        ? new Promise<boolean>((resolve) => held.push(() => resolve(publish(event))))
        : publish(event);
    try {
      const tasks = Array.from({ length: 12 }, (_, n) =>
        intake.deliver({ id: `task-end-${n}`, goal: 'end' }),
      );
      await expect.poll(() => held.length).toBe(12);
      for (const release of held) release();
      await Promise.all(tasks.map((task) => task.handled));
      // A warning is emitted on the next tick.
      await new Promise((resolve) => setImmediate(resolve));
      expect(tasks.map((task) => task.settlement()?.kind)).toEqual(Array(12).fill('ack'));
      expect(warnings.filter((w) => w.includes('MaxListenersExceeded'))).toEqual([]);
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('cancels a running task on a control message, answers the canceller, and acks it', async () => {
    const { intake, handlers, bus, store } = await setUp();
    let stepArrived = () => {};
    const arrived = new Promise<void>((resolve) => (stepArrived = resolve));
    handlers.executor = () => stepArrived();
    const task = intake.deliver({ id: 'task-3', goal: 'take forever' });
    await arrived;
    const receipt = await bus.request(
      subjects.control('task-3'),
      { action: 'cancel', reason: 'changed my mind' },
      ControlReceipt,
      {
        timeoutMs: 1_000,
      },
    );
    expect(receipt).toEqual({ ok: true, taskId: 'task-3', outcome: 'cancelled' });
    await task.handled;
    expect(bus.eventsOf('task.cancelled')[0]?.data).toMatchObject({ reason: 'changed my mind' });
    expect((await store.get('task-3'))?.value.status).toBe('cancelled');
    expect(task.settlement()).toEqual({ kind: 'ack' });
  });

  it('publishes the stored final event again, same id, when an ended task is delivered again', async () => {
    const { intake, bus, steps } = await setUp();
    const first = intake.deliver({ id: 'task-4', goal: 'once' });
    await first.handled;
    const again = intake.deliver(
      { id: 'task-4', goal: 'once' },
      { streamSequence: first.delivery.streamSequence, deliveryCount: 2 },
    );
    await again.handled;
    const finals = bus.eventsOf('task.completed').filter((e) => e.taskId === 'task-4');
    expect(finals).toHaveLength(2);
    expect(finals[1]?.id).toBe(finals[0]?.id);
    expect(steps.filter((s) => s.taskId === 'task-4')).toHaveLength(2);
    expect(again.settlement()).toEqual({ kind: 'ack' });
  });

  it('ignores another submission with a task id already taken, and acks it', async () => {
    const { intake, steps, kinds } = await setUp();
    await intake.deliver({ id: 'task-5', goal: 'first' }).handled;
    const duplicate = intake.deliver({ id: 'task-5', goal: 'second' });
    await duplicate.handled;
    expect(steps.filter((s) => s.taskId === 'task-5').map((s) => s.goal)).toEqual(['first', 'first']);
    expect(kinds('task-5').filter((k) => k === 'task.accepted')).toHaveLength(1);
    expect(duplicate.settlement()).toEqual({ kind: 'ack' });
  });

  it('refuses a payload that is not a task: terminated, reported, nothing run', async () => {
    const { intake, bus, steps } = await setUp();
    const reports: InvalidMessageEvent[] = [];
    bus.subscribe(subjects.invalid, InvalidMessageEvent, (d) => void reports.push(d.value));
    const bad = intake.deliver({ goal: 42 });
    await bad.handled;
    await bus.settled();
    expect(bad.settlement()).toEqual({ kind: 'term' });
    expect(reports[0]).toMatchObject({ reporter: 'coordinator', pipeline: 'unit' });
    expect(steps).toHaveLength(0);
  });

  it('dead-letters a task delivered too often without progress, fails it, and terminates it', async () => {
    const { intake, bus, steps } = await setUp({ maxDeliver: 3 });
    const task = intake.deliver({ id: 'task-6', goal: 'doomed' }, { deliveryCount: 4 });
    await task.handled;
    expect(intake.deadLetters).toEqual([
      expect.objectContaining({ pipeline: 'unit', reason: expect.objectContaining({ taskId: 'task-6' }) }),
    ]);
    expect(bus.eventsOf('task.failed')[0]?.data).toMatchObject({ reason: 'max_deliveries' });
    expect(task.settlement()).toEqual({ kind: 'term' });
    expect(steps).toHaveLength(0);
  });

  describe('a task whose input is stored', () => {
    const ref = (taskId: string) => ({
      bucket: 'troupe-inputs-unit',
      name: `${taskId}.input.0123456789abcdef`,
      bytes: 20,
      sha256: 'a'.repeat(64),
    });
    /** The inputs bucket, as the runner reads it: the objects it holds, and how many reads it was asked for. */
    const inputs = (objects: Record<string, string>) => {
      const store = {
        reads: 0,
        read: async ({ name }: { name: string }) => {
          store.reads += 1;
          const text = objects[name];
          if (text === undefined) throw new ValueStoreError('value_missing', `value ${name} is not stored`);
          return text;
        },
      };
      return store;
    };

    it('reads it once, and gives every step the input it names', async () => {
      const values = inputs({ 't-in.input.0123456789abcdef': '{"doc":"the text"}' });
      const { intake, steps } = await setUp({ values });
      const task = intake.deliver({ id: 't-in', goal: 'read it', inputRef: ref('t-in') });
      await task.handled;
      expect(task.settlement()).toEqual({ kind: 'ack' });
      expect(steps.map((step) => step.input)).toEqual([{ doc: 'the text' }, { doc: 'the text' }]);
      expect(values.reads).toBe(1);
    });

    it('refuses a new task whose input is not stored, and fails one claimed before, never checkpointed', async () => {
      const values = inputs({});
      const { intake, store, bus, kinds } = await setUp({ values });
      const reports: InvalidMessageEvent[] = [];
      bus.subscribe(subjects.invalid, InvalidMessageEvent, (d) => void reports.push(d.value));
      const fresh = intake.deliver({ id: 't-none', goal: 'read nothing', inputRef: ref('t-none') });
      await fresh.handled;
      expect(fresh.settlement()).toEqual({ kind: 'term' });
      expect(await store.get('t-none')).toBeUndefined();
      expect(reports.at(-1)?.reason).toMatch(/t-none\.input\.0123456789abcdef is not stored/);

      // Claimed by a coordinator that died before its first checkpoint; meanwhile the input went.
      const now = new Date().toISOString();
      await store.create('t-gone', {
        taskId: 't-gone',
        pipeline: 'unit',
        streamSequence: 77,
        status: 'running',
        state: 'plan',
        goal: 'read what went',
        round: 1,
        usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
        createdAt: now,
        updatedAt: now,
        lease: 'the-dead-one',
        progress: 0,
      });
      const again = intake.deliver(
        { id: 't-gone', goal: 'read what went', inputRef: ref('t-gone') },
        { streamSequence: 77, deliveryCount: 2 },
      );
      await again.handled;
      expect(kinds('t-gone')).toContain('task.failed');
      expect((await store.get('t-gone'))?.value.final?.data).toMatchObject({
        reason: 'unresumable',
        message: expect.stringMatching(/cannot resume: cannot read the task's stored input/),
      });
    });
  });

  it('hands a running task back when it stops, leaving its record running to be resumed', async () => {
    const { intake, handlers, store, runner } = await setUp();
    let stepArrived = () => {};
    const arrived = new Promise<void>((resolve) => (stepArrived = resolve));
    handlers.executor = () => stepArrived();
    const task = intake.deliver({ id: 'task-7', goal: 'interrupted' });
    await arrived;
    expect(runner.running()).toEqual(['task-7']);
    await runner.stop();
    await task.handled;
    expect(task.settlement()).toMatchObject({ kind: 'nak' });
    expect((await store.get('task-7'))?.value).toMatchObject({
      status: 'running',
      state: 'execute',
      delivery: expect.objectContaining({ handedBack: true }),
    });
  });

  it('hands a task back when the stop comes between its claim and its run', async () => {
    const { intake, bus, runner, store } = await setUp();
    // The stop lands just after the claim has looked at whether the runner is stopping.
    const publishEvent = bus.publishEvent.bind(bus);
    let stopped: Promise<void> | undefined;
    bus.publishEvent = (event) => {
      if (event.kind === 'task.accepted')
        queueMicrotask(() => {
          stopped = runner.stop();
        });
      return publishEvent(event);
    };
    const task = intake.deliver({ id: 'task-gap', goal: 'claimed as it stops' });
    await task.handled;
    await stopped;
    expect(task.settlement()).toMatchObject({ kind: 'nak' });
    expect((await store.get('task-gap'))?.value).toMatchObject({
      status: 'running',
      delivery: expect.objectContaining({ handedBack: true }),
    });
  });

  it('resumes a handed-back task from its checkpoint: the steps done are not run again', async () => {
    const first = await setUp();
    let stepArrived = () => {};
    const arrived = new Promise<void>((resolve) => (stepArrived = resolve));
    first.handlers.executor = () => stepArrived();
    const task = first.intake.deliver({ id: 'task-8', goal: 'resume me' });
    await arrived;
    await first.runner.stop();
    await task.handled;
    delete first.handlers.executor;
    // A new runner (another coordinator) over the same record gets the message again.
    const second = new MemoryTaskIntake();
    const resumed = await startPipelineRunner({
      bus: first.bus,
      intake: second,
      config,
      store: first.store,
      logger: createLogger({ level: 'silent' }),
      clock: first.clock,
      concurrency: 4,
    });
    running.push(resumed);
    const redelivered = second.deliver(
      { id: 'task-8', goal: 'resume me' },
      { streamSequence: task.delivery.streamSequence, deliveryCount: 2 },
    );
    await redelivered.handled;
    expect(first.steps.map((s) => s.stepId)).toEqual([
      'task-8.plan.1',
      'task-8.execute.1',
      'task-8.execute.1',
    ]);
    // The first delivery's steps were fresh; the resumed run's may have run before, and are not.
    expect(first.steps.map((s) => s.fresh)).toEqual([true, true, undefined]);
    expect(first.kinds('task-8')).toContain('task.resumed');
    expect(redelivered.settlement()).toEqual({ kind: 'ack' });
  });

  it('stops running a task another coordinator took over, and leaves its message alone', async () => {
    const { intake, handlers, store, bus } = await setUp();
    let reply: (() => void) | undefined;
    let stepArrived = () => {};
    const arrived = new Promise<void>((resolve) => (stepArrived = resolve));
    handlers.executor = (delivery) => {
      reply = () =>
        delivery.respond({ ok: true, stepId: delivery.value.stepId, output: 'late', usage, turns: 1 });
      stepArrived();
    };
    const task = intake.deliver({ id: 'task-9', goal: 'contested' });
    await arrived;
    // Another coordinator claims the task: its run token replaces this one's (whatever this run wrote meanwhile).
    const claim = async (): Promise<void> => {
      const current = await store.get('task-9');
      const claimed = await store.update(
        'task-9',
        { ...(current?.value as WorkflowRecord), lease: 'another' },
        current?.revision ?? 0,
      );
      if (claimed === undefined) await claim();
    };
    await claim();
    reply?.();
    await task.handled;
    expect(task.settlement()).toBeUndefined();
    expect(
      bus.events.filter((e: TroupeEvent) => e.taskId === 'task-9' && e.kind === 'task.completed'),
    ).toEqual([]);
    expect((await store.get('task-9'))?.value.lease).toBe('another');
  });

  it('lets go of a task whose actor fails on a fault of ours: nothing of it is left running, and a redelivery runs it', async () => {
    const { intake, runner, store } = await setUp();
    const first = intake.deliver({ id: 'task-10', goal: 'meet a bug' });
    // A fault inside the task actor (here: its delivery throws when the step parks it), not a fault of the task.
    first.delivery.park = () => {
      throw new Error('a bug of ours');
    };
    await expect(first.handled).rejects.toThrow('a bug of ours');
    // XState leaves an errored actor's children running; left so, the task would be heard as running here forever.
    expect(runner.running()).toEqual([]);
    const again = intake.deliver(
      { id: 'task-10', goal: 'meet a bug' },
      {
        streamSequence: first.delivery.streamSequence,
        deliveryCount: 2,
      },
    );
    await again.handled;
    expect(again.settlement()).toEqual({ kind: 'ack' });
    expect((await store.get('task-10'))?.value.status).toBe('completed');
  });
});
