import {
  AgentStepRequest,
  ControlReceipt,
  DecisionReceipt,
  HumanRequest,
  subjects,
  type UsageTotals,
  WorkflowRecord,
} from '@troupe/protocol';
import {
  closeTaskRequests,
  createLogger,
  EventFactory,
  holdTaskRequests,
  JournalEntry,
  NatsHumanGate,
  StepJournal,
  underPrefix,
} from '@troupe/runtime';
import { MemoryBus, MemoryKv, SimulatedClock } from '@troupe/testkit';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { PipelineConfig } from '../../src/config/pipelineSchema.ts';
import { TaskSignals } from '../../src/task/taskSignals.ts';
import { PeopleInFlight } from '../../src/workflow/peopleInFlight.ts';
import { type PipelineRunner, startPipelineRunner } from '../../src/workflow/pipelineRunner.ts';
import { MemoryTaskIntake } from '../memoryTaskIntake.ts';
import { timePasser } from '../support/passTime.ts';

const usage: UsageTotals = { inputTokens: 2, outputTokens: 1, cachedTokens: 0, costUsd: 0, modelCalls: 1 };
const PASSIVATE_AFTER_MS = 2_000;
const ASK_S = 60;

/** A person asked first (60 s to answer), then an agent that answers at once. */
const config = PipelineConfig.parse({
  version: 1,
  name: 'unit',
  models: { scripted: { provider: 'scripted', script: './unit.script.yaml' } },
  defaults: { model: 'scripted' },
  agents: { builder: { instructions: 'Build.' } },
  flow: [
    { id: 'ask', kind: 'human', prompt: 'Ship it?', timeout: ASK_S },
    { id: 'build', kind: 'agent', agent: 'builder' },
  ],
});

interface Shared {
  clock: SimulatedClock;
  bus: MemoryBus;
  store: MemoryKv<WorkflowRecord>;
  approvals: MemoryKv<HumanRequest>;
  journal: StepJournal;
  intake: MemoryTaskIntake;
}

/**
 * A pipeline runner on an in-memory bus, KV buckets and task intake, on a simulated clock, asking people through the
 * NATS gate and wired as `coordinator.ts` wires it (its tasks' requests closed at their end, held at their pause).
 * Passivation after 2 s, off when `live`. Given `shared`, a second runner on the first one's bus, buckets and clock.
 */
async function setUp(options: { live?: boolean; shared?: Shared } = {}) {
  const clock = options.shared?.clock ?? new SimulatedClock();
  const bus = options.shared?.bus ?? new MemoryBus({ clock });
  const store = options.shared?.store ?? new MemoryKv(WorkflowRecord);
  const approvals = options.shared?.approvals ?? new MemoryKv(HumanRequest);
  const journal = options.shared?.journal ?? new StepJournal(new MemoryKv(JournalEntry));
  const intake = options.shared?.intake ?? new MemoryTaskIntake();
  const logger = createLogger({ level: 'silent' });
  const writes: WorkflowRecord[] = [];
  if (!options.shared) {
    const update = store.update.bind(store);
    store.update = (key, value, revision) => {
      writes.push(value);
      return update(key, value, revision);
    };
    bus.subscribe(subjects.agent('unit', 'builder'), AgentStepRequest, (delivery) =>
      delivery.respond({ ok: true, stepId: delivery.value.stepId, output: 'built', usage, turns: 1 }),
    );
  }
  const gate = new NatsHumanGate({
    bus,
    store: approvals,
    events: new EventFactory(clock),
    clock,
    logger,
    timeoutMs: ASK_S * 1_000,
  });
  const requests = { journal, store: underPrefix(approvals, 'unit'), now: () => clock.now() };
  const runner = await startPipelineRunner({
    bus,
    intake,
    config,
    store,
    logger,
    clock,
    concurrency: 4,
    people: { gate, journal, clock },
    closeRequests: (taskId, ending) => closeTaskRequests(taskId, ending, requests),
    holdRequests: (taskId, change) => holdTaskRequests(taskId, change, requests),
    passivateAfterMs: options.live ? 0 : PASSIVATE_AFTER_MS,
  });
  running.push(runner);
  const pass = timePasser(bus, clock);
  const events = (taskId: string) => bus.events.filter((e) => e.taskId === taskId);
  const control = (taskId: string, message: Record<string, unknown>) =>
    bus.request(subjects.control(taskId), message, ControlReceipt, { timeoutMs: 1_000 });
  /** The task's requests to people, as KV holds them. */
  const requestsOf = async (taskId: string) =>
    (await Promise.all((await approvals.keys()).map((key) => approvals.get(key))))
      .map((entry) => entry?.value)
      .filter((record) => record?.taskId === taskId);
  /** The id of the task's question, once it is asked. */
  const question = async (taskId: string) => {
    await expect.poll(async () => (await requestsOf(taskId)).length).toBe(1);
    return (await requestsOf(taskId))[0]?.id as string;
  };
  /** A person's answer on the question's subject, as a person's client sends it: the receipt. */
  const answer = (taskId: string, id: string, text: string) =>
    bus.request(subjects.approval('unit', taskId, id), { answer: text, by: 'ana' }, DecisionReceipt, {
      timeoutMs: 1_000,
    });
  const shared: Shared = { clock, bus, store, approvals, journal, intake };
  return { ...shared, shared, gate, writes, runner, pass, events, control, requestsOf, question, answer };
}

const running: PipelineRunner[] = [];
/** The runs of human steps of every runner started, kept under way (to see none is left once its task ended). */
const inFlight = new Set<PeopleInFlight>();
const start = PeopleInFlight.prototype.start;
PeopleInFlight.prototype.start = function (this: PeopleInFlight, ...args: Parameters<typeof start>) {
  inFlight.add(this);
  return start.apply(this, args);
};
afterEach(async () => {
  await Promise.all(running.splice(0).map((runner) => runner.stop()));
  inFlight.clear();
});
afterAll(() => {
  PeopleInFlight.prototype.start = start;
});

/** A record as two runs of one task on the same clock write it alike: without its lease token, event ids and traces. */
const comparable = ({ lease: _lease, final, ...record }: WorkflowRecord): unknown =>
  JSON.parse(
    JSON.stringify({ ...record, final: final && { kind: final.kind, data: final.data } })
      .replace(/00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]/g, 'traceparent')
      .replace(/q-[A-Za-z0-9_-]{12}/g, 'question'),
  );

type Setup = Awaited<ReturnType<typeof setUp>>;

/**
 * Runs `scenario` on a task live and then passivated (it says when its task should sleep by `asleep`): both must
 * publish the same events, write the same records and requests, and settle the message alike.
 */
async function sameAsLive(taskId: string, scenario: (setup: Setup, asleep: () => void) => Promise<void>) {
  const run = async (live: boolean) => {
    const setup = await setUp({ live });
    const task = setup.intake.deliver({ id: taskId, goal: 'ask first' });
    const id = await setup.question(taskId);
    const slept: number[] = [];
    await scenario(setup, () => slept.push(setup.runner.passivated()));
    await task.handled;
    await setup.bus.settled();
    // Nothing of the step's run is kept once its task has ended.
    expect([...inFlight].map((people) => people.size)).toEqual(live ? [] : [0]);
    inFlight.clear();
    const events = setup.events(taskId).map((e) => ({
      kind: e.kind,
      at: e.ts,
      data: JSON.parse(JSON.stringify(e.data).replaceAll(id, 'question')),
    }));
    const requests = (await setup.requestsOf(taskId)).map((r) => comparable(r as never));
    return { events, writes: setup.writes.map(comparable), requests, slept, settlement: task.settlement() };
  };
  const live = await run(true);
  const passive = await run(false);
  expect(live.slept.every((n) => n === 0)).toBe(true);
  expect(passive.slept.length).toBeGreaterThan(0);
  expect(passive.slept.every((n) => n === 1)).toBe(true);
  expect(passive.events).toEqual(live.events);
  expect(passive.writes).toEqual(live.writes);
  expect(passive.requests).toEqual(live.requests);
  expect(passive.settlement).toEqual(live.settlement);
  // Asked once, whatever woke the task.
  expect(passive.events.filter((e) => e.kind === 'human.asked')).toHaveLength(1);
  expect(passive.requests).toHaveLength(1);
  return passive;
}

describe('passivation of a task that waits on a person (a human step)', () => {
  it('stops its tree while it waits, and wakes on the answer to end as a live task does: same events, records, receipt, one question', async () => {
    const receipts: unknown[] = [];
    const passive = await sameAsLive('task-1', async ({ pass, answer, question }, asleep) => {
      await pass(5_000);
      asleep();
      await pass(5_000);
      asleep();
      receipts.push(await answer('task-1', await question('task-1'), 'yes'));
    });
    expect(receipts).toEqual([
      { ok: true, id: expect.any(String), outcome: 'answered' },
      { ok: true, id: expect.any(String), outcome: 'answered' },
    ]);
    expect(passive.events.filter((e) => e.kind === 'human.answered')).toHaveLength(1);
    // The step's time counts the time the task slept: asked at 0, answered 10 s later.
    expect(passive.events.find((e) => e.kind === 'step.completed')?.data).toMatchObject({
      step: 'ask',
      durationMs: 10_000,
    });
    expect(passive.requests[0]).toMatchObject({ status: 'answered', answer: 'yes', by: 'ana' });
    expect(passive.settlement).toEqual({ kind: 'ack' });
  });

  it('leaves a task answered before it could sleep live, and keeps nothing of its step’s run once it ends', async () => {
    const { intake, question, pass, runner, answer, bus } = await setUp();
    const task = intake.deliver({ id: 'task-q', goal: 'answered at once' });
    const id = await question('task-q');
    await pass(1_000);
    expect(await answer('task-q', id, 'yes')).toMatchObject({ outcome: 'answered' });
    await pass(0);
    await task.handled;
    expect(runner.passivated()).toBe(0);
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
    expect([...inFlight].map((people) => people.size)).toEqual([0]);
  });

  it('wakes at the step deadline while it sleeps: the question expires once, the task fails with approval_timeout', async () => {
    const passive = await sameAsLive('task-t', async ({ pass }, asleep) => {
      await pass(5_000);
      asleep();
      await pass(ASK_S * 1_000 - 5_000 - 200);
      asleep();
      await pass(400);
    });
    expect(passive.events.at(-1)).toMatchObject({
      kind: 'task.failed',
      data: { reason: 'approval_timeout' },
    });
    expect(passive.requests[0]).toMatchObject({ status: 'expired' });
    expect(passive.settlement).toEqual({ kind: 'ack' });
  });

  it('wakes on a cancel: answers it, cancels the task, ends its question, and acks it', async () => {
    const receipts: unknown[] = [];
    const passive = await sameAsLive('task-c', async ({ pass, control }, asleep) => {
      await pass(5_000);
      asleep();
      const receipt = control('task-c', { action: 'cancel', reason: 'changed my mind' });
      await pass(0);
      receipts.push(await receipt);
    });
    expect(receipts).toEqual([
      { ok: true, taskId: 'task-c', outcome: 'cancelled' },
      { ok: true, taskId: 'task-c', outcome: 'cancelled' },
    ]);
    expect(passive.events.at(-1)).toMatchObject({ kind: 'task.cancelled' });
    expect(passive.settlement).toEqual({ kind: 'ack' });
  });

  it('wakes on a pause and a resume: the question is held meanwhile and still answerable, asleep again between', async () => {
    const passive = await sameAsLive(
      'task-p',
      async ({ pass, control, answer, question, requestsOf }, asleep) => {
        await pass(5_000);
        asleep();
        const paused = control('task-p', { action: 'pause', by: 'ana' });
        await pass(0);
        expect(await paused).toMatchObject({ ok: true });
        // Held past the question's 60 s, asleep again meanwhile: it does not run out.
        await pass(ASK_S * 1_000 + 5_000, 1_000);
        asleep();
        expect((await requestsOf('task-p'))[0]).toMatchObject({ status: 'pending', held: expect.anything() });
        const resumed = control('task-p', { action: 'resume', by: 'ana' });
        await pass(0);
        expect(await resumed).toMatchObject({ ok: true });
        await pass(5_000);
        asleep();
        expect(await answer('task-p', await question('task-p'), 'yes')).toMatchObject({
          outcome: 'answered',
        });
      },
    );
    expect(passive.events.at(-1)).toMatchObject({ kind: 'task.completed' });
    expect(passive.settlement).toEqual({ kind: 'ack' });
  });

  it('wakes on a tell: records it and answers it as a live task does, and sleeps on until the answer', async () => {
    const passive = await sameAsLive('task-m', async ({ pass, control, answer, question }, asleep) => {
      await pass(5_000);
      asleep();
      const told = control('task-m', { action: 'tell', text: 'ship on Friday', key: 'k-1' });
      await pass(0);
      expect(await told).toMatchObject({ ok: true });
      await pass(5_000);
      asleep();
      expect(await answer('task-m', await question('task-m'), 'yes')).toMatchObject({ outcome: 'answered' });
    });
    expect(passive.events.at(-1)).toMatchObject({ kind: 'task.completed' });
    expect(passive.events.filter((e) => e.kind === 'task.told')).toHaveLength(1);
  });

  it('sleeps before its question is recorded: the run asks it while the task sleeps, once, and the task completes on its answer', async () => {
    const { intake, approvals, pass, runner, events, requestsOf, question, answer } = await setUp();
    // The question's record in KV is held: the step's run is under way (its question's id journaled), nobody asked yet.
    const put = approvals.put.bind(approvals);
    let recordIt = () => {};
    const recorded = new Promise<void>((resolve) => {
      recordIt = resolve;
    });
    approvals.put = async (key, value) => {
      await recorded;
      return put(key, value);
    };
    const task = intake.deliver({ id: 'task-u', goal: 'sleep before asking' });
    await pass(PASSIVATE_AFTER_MS + 1_000);
    expect(runner.passivated()).toBe(1);
    expect(await requestsOf('task-u')).toEqual([]);
    expect(events('task-u').map((e) => e.kind)).not.toContain('human.asked');
    recordIt();
    const id = await question('task-u');
    await pass(0);
    // Asked while its task sleeps: recorded pending and announced, and the task sleeps on until the answer.
    expect(runner.passivated()).toBe(1);
    expect(await requestsOf('task-u')).toEqual([expect.objectContaining({ status: 'pending', id })]);
    expect(events('task-u').filter((e) => e.kind === 'human.asked')).toHaveLength(1);
    expect(await answer('task-u', id, 'yes')).toMatchObject({ ok: true, outcome: 'answered' });
    await pass(0);
    await task.handled;
    expect(task.settlement()).toEqual({ kind: 'ack' });
    expect(runner.passivated()).toBe(0);
    expect(events('task-u').at(-1)).toMatchObject({ kind: 'task.completed' });
    expect(events('task-u').filter((e) => e.kind === 'human.asked')).toHaveLength(1);
    expect(await requestsOf('task-u')).toEqual([
      expect.objectContaining({ status: 'answered', answer: 'yes' }),
    ]);
  });

  it('loses no answer that comes as the task is put to sleep: recorded, taken once, the task completes', async () => {
    const passive = await sameAsLive('task-r', async ({ pass, answer, question, clock }, asleep) => {
      const id = await question('task-r');
      await pass(PASSIVATE_AFTER_MS - 100);
      // To the sweep that passivates it, in one move: the answer lands as its tree stops, before anything of the
      // stop has settled.
      clock.advance(100);
      asleep();
      const receipt = answer('task-r', id, 'yes');
      await pass(0);
      expect(await receipt).toMatchObject({ ok: true, outcome: 'answered' });
    });
    expect(passive.events.filter((e) => e.kind === 'human.answered')).toHaveLength(1);
    expect(passive.requests[0]).toMatchObject({ status: 'answered' });
    expect(passive.events.at(-1)).toMatchObject({ kind: 'task.completed' });
  });

  it('wakes on the runner’s stop: the task is handed back, its question left pending, and another runner takes it up and ends it on the answer', async () => {
    const first = await setUp();
    const task = first.intake.deliver({ id: 'task-s', goal: 'stop meanwhile' });
    const id = await first.question('task-s');
    await first.pass(5_000);
    expect(first.runner.passivated()).toBe(1);
    // As the coordinator stops: its gate leaves what it asks pending, then its runners stop.
    first.gate.detach();
    const stopping = first.runner.stop();
    await first.pass(0);
    await stopping;
    await task.handled;
    expect(task.settlement()).toMatchObject({ kind: 'nak' });
    expect((await first.requestsOf('task-s'))[0]?.status).toBe('pending');
    const second = await setUp({ shared: first.shared });
    const again = first.intake.deliver(
      { id: 'task-s', goal: 'stop meanwhile' },
      { streamSequence: task.delivery.streamSequence, deliveryCount: 2 },
    );
    await first.pass(5_000);
    expect(second.runner.passivated()).toBe(1);
    expect(await first.answer('task-s', id, 'yes')).toMatchObject({ ok: true, outcome: 'answered' });
    await first.pass(0);
    await again.handled;
    expect(first.bus.eventsOf('task.completed')).toHaveLength(1);
    expect(await first.requestsOf('task-s')).toHaveLength(1);
    expect((await first.requestsOf('task-s'))[0]).toMatchObject({ status: 'answered', answer: 'yes' });
    expect(again.settlement()).toEqual({ kind: 'ack' });
  });
});

describe('a woken task whose restored tree fails after its human step took its run up', () => {
  it('leaves its question pending for the redelivery, not closed expired', async () => {
    const { intake, question, pass, runner, control, requestsOf, events } = await setUp();
    const task = intake.deliver({ id: 'task-x', goal: 'fail as it wakes' });
    await question('task-x');
    await pass(5_000);
    expect(runner.passivated()).toBe(1);
    // The restored step takes its run up; then a fault of ours fails the woken task actor: its run context (started
    // beside the workflow) cannot listen for the task's signals.
    let adopted = 0;
    const adopt = PeopleInFlight.prototype.adopt;
    PeopleInFlight.prototype.adopt = function (this: PeopleInFlight, ...args: Parameters<typeof adopt>) {
      const run = adopt.apply(this, args);
      if (run) adopted += 1;
      return run;
    };
    const listen = TaskSignals.prototype.listen;
    TaskSignals.prototype.listen = () => {
      throw new Error('cannot listen for the task’s signals');
    };
    try {
      const told = control('task-x', { action: 'tell', text: 'ship on Friday', key: 'k-1' }).catch(
        (error: unknown) => error,
      );
      await pass(0);
      expect(await told).toMatchObject({ code: 'not_running' });
    } finally {
      PeopleInFlight.prototype.adopt = adopt;
      TaskSignals.prototype.listen = listen;
    }
    await task.handled.catch(() => {});
    await pass(0);
    expect(adopted).toBe(1);
    expect(runner.passivated()).toBe(0);
    // Left to the redelivery, which waits on the same question: not closed, nothing announced.
    expect((await requestsOf('task-x'))[0]).toMatchObject({ status: 'pending' });
    expect(events('task-x').filter((e) => e.kind.startsWith('human.'))).toHaveLength(1);
    expect([...inFlight].map((people) => people.size)).toEqual([0]);
  });
});
