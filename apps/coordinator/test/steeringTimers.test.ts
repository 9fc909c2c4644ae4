import { type AgentStepReply, DecisionReceipt, HumanRequest, subjects } from '@troupe/protocol';
import {
  type Bus,
  type Clock,
  createLogger,
  EventFactory,
  type HumanGate,
  type HumanScope,
  NatsHumanGate,
  type StepJournal,
} from '@troupe/runtime';
import { MemoryKv } from '@troupe/testkit';
import { describe, expect, it } from 'vitest';
import { HOUR, ok, paused, pipeline, setUp, usage } from './support/steeringRunner.ts';

/** A step's own time (`defaults.stepTimeout` of the steering runner's pipelines): 60 s. */
const STEP_MS = 60_000;

const withDeadline = (pausedTimeCounts?: boolean) =>
  pipeline(
    [
      { id: 'plan', kind: 'agent', agent: 'planner' },
      { id: 'build', kind: 'agent', agent: 'builder' },
    ],
    { budget: { timeout: 120, ...(pausedTimeCounts === undefined ? {} : { pausedTimeCounts }) } },
  );

const withDeadlineless = () =>
  pipeline([{ id: 'plan', kind: 'agent', agent: 'planner' }], { budget: { pausedTimeCounts: true } });

describe('a held task’s deadline (budget.pausedTimeCounts)', () => {
  it('is refused without budget.timeout, saying what to set', () => {
    expect(() => withDeadlineless()).toThrow(
      /pausedTimeCounts.*set budget\.timeout \(seconds\), or remove pausedTimeCounts/s,
    );
  });

  it('by default moves on by the time held: a deadline passing while paused ends nothing', async () => {
    const { intake, control, next, clock, bus } = await setUp(withDeadline());
    const task = intake.deliver({ id: 'dl-1', goal: 'build it' });
    const plan = await next('dl-1.plan.1');
    const deadline = plan.value.budget?.deadline ?? 0;
    await control('dl-1', { action: 'pause' });
    paused(plan);
    await bus.settled();
    // An hour held: far past the task's 120 s.
    clock.advance(HOUR);
    await bus.settled();
    expect(bus.eventsOf('task.failed')).toHaveLength(0);
    await control('dl-1', { action: 'resume' });
    const again = await next('dl-1.plan.1');
    expect(again.value.budget?.deadline).toBe(deadline + HOUR);
    ok(again);
    ok(await next('dl-1.build.1'));
    await task.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
  });

  it('with pausedTimeCounts: false, as by default, moves the deadline on', async () => {
    const { intake, control, next, clock, bus } = await setUp(withDeadline(false));
    const task = intake.deliver({ id: 'dl-2', goal: 'build it' });
    const plan = await next('dl-2.plan.1');
    const deadline = plan.value.budget?.deadline ?? 0;
    await control('dl-2', { action: 'pause' });
    paused(plan);
    await bus.settled();
    clock.advance(30_000);
    await control('dl-2', { action: 'resume' });
    const again = await next('dl-2.plan.1');
    expect(again.value.budget?.deadline).toBe(deadline + 30_000);
    ok(again);
    ok(await next('dl-2.build.1'));
    await task.handled;
  });

  it('with pausedTimeCounts: true, keeps the deadline where acceptance put it', async () => {
    const { intake, control, next, clock, bus } = await setUp(withDeadline(true));
    const task = intake.deliver({ id: 'dl-3', goal: 'build it' });
    const plan = await next('dl-3.plan.1');
    const deadline = plan.value.budget?.deadline ?? 0;
    await control('dl-3', { action: 'pause' });
    paused(plan);
    await bus.settled();
    clock.advance(30_000);
    await control('dl-3', { action: 'resume' });
    const again = await next('dl-3.plan.1');
    expect(again.value.budget?.deadline).toBe(deadline);
    // The step's own time never counts the time held: 60 s, less none spent at work; the deadline's 90 s is later.
    expect(again.value.timeoutMs).toBe(STEP_MS);
    ok(again);
    ok(await next('dl-3.build.1'));
    await task.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
  });

  it('with pausedTimeCounts: true, ends a task held past its deadline at the deadline, paused, as past its deadline', async () => {
    const { intake, control, next, clock, bus } = await setUp(withDeadline(true));
    const task = intake.deliver({ id: 'dl-4', goal: 'build it' });
    const plan = await next('dl-4.plan.1');
    await control('dl-4', { action: 'pause' });
    paused(plan);
    await bus.settled();
    clock.advance(119_000);
    await bus.settled();
    expect(bus.eventsOf('task.failed')).toHaveLength(0);
    clock.advance(1_000);
    await task.handled;
    expect(bus.eventsOf('task.failed')[0]?.data).toMatchObject({ reason: 'budget_exceeded', step: 'plan' });
    expect(bus.eventsOf('task.failed')[0]?.data.message).toContain('the time the task was paused counted');
  });

  it('with pausedTimeCounts: true, ends at the deadline a task held while its step is still at work', async () => {
    const { intake, control, next, clock, bus } = await setUp(withDeadline(true));
    const task = intake.deliver({ id: 'dl-5', goal: 'build it' });
    await next('dl-5.plan.1');
    // Its agent waits on a person: no `paused` reply comes until the person answers.
    await control('dl-5', { action: 'pause' });
    clock.advance(119_999);
    await bus.settled();
    expect(bus.eventsOf('task.failed')).toHaveLength(0);
    clock.advance(1);
    await task.handled;
    expect(bus.eventsOf('task.failed')[0]?.data).toMatchObject({ reason: 'budget_exceeded', step: 'plan' });
  });
});

describe('a step held while its agent is still at work', () => {
  it('is not failed by its timeout while held, and has only what was left of its time once let go', async () => {
    const { intake, control, next, clock, bus } = await setUp(
      pipeline([{ id: 'plan', kind: 'agent', agent: 'planner' }]),
    );
    const task = intake.deliver({ id: 'at-1', goal: 'build it' });
    await next('at-1.plan.1');
    clock.advance(20_000);
    // Paused while its agent waits on a person: the host replies `paused` only once the person answers.
    await control('at-1', { action: 'pause' });
    clock.advance(HOUR);
    await bus.settled();
    expect(bus.eventsOf('task.failed')).toHaveLength(0);
    await control('at-1', { action: 'resume' });
    await bus.settled();
    // 40 s of the step were left, and 2 s for the agent's own account: the request does not start afresh.
    clock.advance(41_900);
    await bus.settled();
    expect(bus.eventsOf('task.failed')).toHaveLength(0);
    clock.advance(200);
    await task.handled;
    expect(bus.eventsOf('task.failed')[0]?.data).toMatchObject({ step: 'plan' });
    expect(bus.eventsOf('task.failed')[0]?.data.message).toContain('within the step timeout');
  });

  it('answered by its person after its time while held, is sent again on resume with the time it had left', async () => {
    const { intake, control, next, clock, bus } = await setUp(
      pipeline([
        { id: 'plan', kind: 'agent', agent: 'planner' },
        { id: 'build', kind: 'agent', agent: 'builder' },
      ]),
    );
    const task = intake.deliver({ id: 'at-2', goal: 'build it' });
    const plan = await next('at-2.plan.1');
    clock.advance(20_000);
    await control('at-2', { action: 'pause' });
    // The person answers two minutes later, well past the step's 60 s: its host finishes the call, then stops.
    clock.advance(120_000);
    await bus.settled();
    paused(plan);
    await bus.settled();
    clock.advance(HOUR);
    await bus.settled();
    expect(bus.eventsOf('task.failed')).toHaveLength(0);
    await control('at-2', { action: 'resume' });
    const again = await next('at-2.plan.1');
    expect(again.value.timeoutMs).toBe(STEP_MS - 20_000);
    ok(again);
    ok(await next('at-2.build.1'));
    await task.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
  });
  it('resumed while its agent still works, and stopped by it later, is sent again with the time it had left', async () => {
    const { intake, control, next, clock, bus } = await setUp(
      pipeline([{ id: 'plan', kind: 'agent', agent: 'planner' }]),
    );
    const task = intake.deliver({ id: 'at-3', goal: 'build it' });
    const plan = await next('at-3.plan.1');
    clock.advance(20_000);
    await control('at-3', { action: 'pause' });
    clock.advance(HOUR);
    await control('at-3', { action: 'resume' });
    await bus.settled();
    clock.advance(5_000);
    // Its host stopped for the pause only now, after the resume: the step goes again, with 35 s of its 60.
    paused(plan);
    const again = await next('at-3.plan.1');
    expect(again.value.timeoutMs).toBe(STEP_MS - 25_000);
    ok(again);
    await task.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
  });
});

/**
 * People played by the test: each question waits for `answer`, or fails with `timeout` when the time the step gave it
 * (`scope.timeoutMs`) passes on the clock, as the NATS gate's does.
 */
function people(clock: Clock) {
  const asked: { id: string; timeoutMs: number | undefined; answer: (text: string) => void }[] = [];
  const ids = new Map<string, string>();
  const journal = {
    humanRequest: async (key: string) => ids.get(key),
    recordHumanRequest: async (key: string, id: string) => void ids.set(key, id),
  } as unknown as StepJournal;
  const gate: HumanGate = {
    approve: async () => ({ decision: 'deny', reason: 'not asked' }),
    ask: (_question: string, scope: HumanScope, signal: AbortSignal, options) =>
      new Promise<string>((resolve, reject) => {
        const id = `q${asked.length + 1}`;
        void options?.onAsked?.(id);
        const timer = clock.setTimeout(
          () => reject(Object.assign(new Error(`nobody answered (question ${id})`), { code: 'timeout' })),
          scope.timeoutMs ?? HOUR,
        );
        signal.addEventListener('abort', () => {
          clock.clearTimeout(timer);
          reject(Object.assign(new Error('cancelled'), { code: 'cancelled' }));
        });
        asked.push({
          id,
          timeoutMs: scope.timeoutMs,
          answer: (text) => {
            clock.clearTimeout(timer);
            resolve(text);
          },
        });
      }),
  };
  return { gate, journal, asked };
}

const askFirst = pipeline([
  { id: 'ask', kind: 'human', prompt: 'Ship it?', timeout: 60 },
  { id: 'build', kind: 'agent', agent: 'builder' },
]);

describe('a human step while its task is paused', () => {
  it('does not count the time held against its timeout: a question expired while held is asked again on resume, with what was left', async () => {
    const { intake, control, next, clock, bus, asked } = await setUpWithPeople();
    const task = intake.deliver({ id: 'hu-1', goal: 'build it' });
    await expect.poll(() => asked.length).toBe(1);
    expect(asked[0]?.timeoutMs).toBe(60_000);
    clock.advance(20_000);
    await control('hu-1', { action: 'pause' });
    // Past the question's 60 s while held: it expires, but the step is not failed, and nobody is asked meanwhile.
    clock.advance(HOUR);
    await bus.settled();
    expect(bus.eventsOf('task.failed')).toHaveLength(0);
    expect(asked).toHaveLength(1);
    await control('hu-1', { action: 'resume' });
    await expect.poll(() => asked.length).toBe(2);
    expect(asked[1]?.timeoutMs).toBe(40_000);
    asked[1]?.answer('yes');
    ok(await next('hu-1.build.1'));
    await task.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
  });

  it('keeps an answer given while paused, and holds the task before its next step', async () => {
    const { intake, control, next, bus, asked, waiting } = await setUpWithPeople();
    const task = intake.deliver({ id: 'hu-2', goal: 'build it' });
    await expect.poll(() => asked.length).toBe(1);
    await control('hu-2', { action: 'pause' });
    asked[0]?.answer('yes');
    await expect
      .poll(() => bus.eventsOf('step.completed').filter((e) => e.data.step === 'ask'))
      .toHaveLength(1);
    await bus.settled();
    expect(waiting).toHaveLength(0);
    await control('hu-2', { action: 'resume' });
    const build = await next('hu-2.build.1');
    expect(build.value.context?.map((c) => c.output)).toContain('yes');
    ok(build);
    await task.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
  });

  it('asks nobody while the task is held: a human step reached while paused asks once resumed', async () => {
    const { intake, control, next, bus, asked } = await setUpWithPeople(
      pipeline([
        { id: 'plan', kind: 'agent', agent: 'planner' },
        { id: 'ask', kind: 'human', prompt: 'Ship it?', timeout: 60 },
      ]),
    );
    const task = intake.deliver({ id: 'hu-3', goal: 'build it' });
    const plan = await next('hu-3.plan.1');
    await control('hu-3', { action: 'pause' });
    ok(plan);
    await expect
      .poll(() => bus.eventsOf('step.completed').filter((e) => e.data.step === 'plan'))
      .toHaveLength(1);
    await bus.settled();
    expect(asked).toHaveLength(0);
    await control('hu-3', { action: 'resume' });
    await expect.poll(() => asked.length).toBe(1);
    asked[0]?.answer('yes');
    await task.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
  });
});

/** The steering runner with people to ask; they keep time on its clock (made inside `setUp`, so reached through it). */
async function setUpWithPeople(config = askFirst) {
  let runner: Awaited<ReturnType<typeof setUp>> | undefined;
  const clock: Clock = {
    now: () => (runner as Awaited<ReturnType<typeof setUp>>).clock.now(),
    setTimeout: (fn, ms) => (runner as Awaited<ReturnType<typeof setUp>>).clock.setTimeout(fn, ms),
    clearTimeout: (id) => (runner as Awaited<ReturnType<typeof setUp>>).clock.clearTimeout(id),
  };
  const played = people(clock);
  runner = await setUp(config, { people: { gate: played.gate, journal: played.journal, clock } });
  return { ...runner, asked: played.asked };
}

/**
 * The steering runner with the gate people are asked through in a coordinator (NatsHumanGate, its records in an
 * in-memory KV bucket), on the runner's bus and clock (made inside `setUp`, so reached through it).
 */
async function setUpWithGate(config = askFirst) {
  let runner: Awaited<ReturnType<typeof setUp>> | undefined;
  const ran = () => runner as Awaited<ReturnType<typeof setUp>>;
  const clock: Clock = {
    now: () => ran().clock.now(),
    setTimeout: (fn, ms) => ran().clock.setTimeout(fn, ms),
    clearTimeout: (id) => ran().clock.clearTimeout(id),
  };
  const bus = new Proxy({} as Bus, {
    get: (_, key) => {
      const value = (ran().bus as unknown as Record<string | symbol, unknown>)[key];
      return typeof value === 'function' ? value.bind(ran().bus) : value;
    },
  });
  const approvals = new MemoryKv(HumanRequest);
  const gate = new NatsHumanGate({
    bus,
    store: approvals,
    events: new EventFactory(clock),
    clock,
    logger: createLogger({ level: 'silent' }),
    timeoutMs: HOUR,
  });
  const ids = new Map<string, string>();
  const journal = {
    humanRequest: async (key: string) => ids.get(key),
    recordHumanRequest: async (key: string, id: string) => void ids.set(key, id),
  } as unknown as StepJournal;
  runner = await setUp(config, { people: { gate, journal, clock } });
  /** The question asked, once it is recorded. */
  const question = async (): Promise<HumanRequest> => {
    await expect.poll(async () => (await approvals.keys()).length).toBe(1);
    const [key] = await approvals.keys();
    return (await approvals.get(key as string))?.value as HumanRequest;
  };
  const record = async (id: string) => (await approvals.get(`unit.${id}`))?.value;
  const answer = (q: HumanRequest, text: string) =>
    ran().bus.request(
      subjects.approval(q.pipeline, q.taskId, q.id),
      { answer: text, by: 'bo' },
      DecisionReceipt,
      {
        timeoutMs: 1_000,
      },
    );
  return { ...runner, question, record, answer };
}

describe('a question a human step asked, while its task is paused (the coordinator’s gate)', () => {
  it('does not run out and stays answerable; answered while paused, the task goes on with the answer after resume', async () => {
    const { intake, control, next, clock, bus, question, record, answer } = await setUpWithGate();
    const task = intake.deliver({ id: 'hq-1', goal: 'build it' });
    const q = await question();
    clock.advance(20_000);
    await control('hq-1', { action: 'pause' });
    await expect.poll(async () => (await record(q.id))?.held?.leftMs).toBe(40_000);
    clock.advance(HOUR);
    await bus.settled();
    expect((await record(q.id))?.status).toBe('pending');
    expect(bus.eventsOf('step.completed')).toHaveLength(0);
    await expect(answer(q, 'yes')).resolves.toMatchObject({ ok: true, outcome: 'answered' });
    await expect
      .poll(() => bus.eventsOf('step.completed').filter((e) => e.data.step === 'ask'))
      .toHaveLength(1);
    await control('hq-1', { action: 'resume' });
    const build = await next('hq-1.build.1');
    expect(build.value.context?.map((c) => c.output)).toContain('yes');
    ok(build);
    await task.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
    // One question, never asked again.
    expect(bus.eventsOf('human.asked')).toHaveLength(1);
  });

  it('has exactly the time it had left from the resume: answerable until then, and runs out then', async () => {
    const { intake, control, clock, bus, question, record, answer } = await setUpWithGate();
    const task = intake.deliver({ id: 'hq-2', goal: 'build it' });
    const q = await question();
    clock.advance(20_000);
    await control('hq-2', { action: 'pause' });
    await expect.poll(async () => (await record(q.id))?.held).toBeDefined();
    clock.advance(HOUR);
    await control('hq-2', { action: 'resume' });
    const resumedAt = clock.now();
    await expect
      .poll(async () => await record(q.id))
      .toMatchObject({ status: 'pending', expiresAt: new Date(resumedAt + 40_000).toISOString() });
    expect((await record(q.id))?.held).toBeUndefined();
    clock.advance(40_000 - 1);
    await bus.settled();
    expect(bus.eventsOf('step.completed')).toHaveLength(0);
    clock.advance(1);
    await task.handled;
    expect(bus.eventsOf('task.failed')[0]?.data).toMatchObject({ reason: 'approval_timeout' });
    expect(bus.eventsOf('human.asked')).toHaveLength(1);
    await expect(answer(q, 'too late')).rejects.toMatchObject({ code: 'no_responders' });
  });

  it('is answered after the resume within the time left, and the task goes on with the answer', async () => {
    const { intake, control, next, clock, bus, question, record, answer } = await setUpWithGate();
    const task = intake.deliver({ id: 'hq-3', goal: 'build it' });
    const q = await question();
    clock.advance(50_000);
    await control('hq-3', { action: 'pause' });
    await expect.poll(async () => (await record(q.id))?.held?.leftMs).toBe(10_000);
    clock.advance(HOUR);
    await control('hq-3', { action: 'resume' });
    await expect.poll(async () => (await record(q.id))?.held).toBeUndefined();
    clock.advance(9_000);
    await bus.settled();
    await expect(answer(q, 'ship')).resolves.toMatchObject({ ok: true });
    const build = await next('hq-3.build.1');
    expect(build.value.context?.map((c) => c.output)).toContain('ship');
    ok(build);
    await task.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
  });
});

/** The task's delivery keep-alive: every third of the runner's ack wait (30 s by default). */
const KEEP_ALIVE_MS = 10_000;
/** The runner's passivation sweep: half its 5 s threshold (see `task/passivation.ts`). */
const PASSIVATION_SWEEP_MS = 2_500;

/**
 * Moves the clock an hour on in ten-minute strides (whole keep-alive periods), checking at each that the clock's
 * pending timers are `expected`: a held task's timers, not one of which may move it on or end it.
 */
async function heldAnHour(
  { clock, bus }: Pick<Awaited<ReturnType<typeof setUp>>, 'clock' | 'bus'>,
  expected: number[],
) {
  for (let minutes = 0; minutes < 60; minutes += 10) {
    expect(clock.pending()).toEqual(expected);
    clock.advance(10 * 60_000);
    await bus.settled();
  }
  expect(clock.pending()).toEqual(expected);
}

describe('a held task’s timers (the clock’s pending timers)', () => {
  it('by default has none but its delivery’s keep-alive while held in an agent step, gets its step’s back on resume, and leaves none', async () => {
    const { intake, control, next, clock, bus } = await setUp(withDeadline());
    const task = intake.deliver({ id: 'pt-1', goal: 'build it' });
    const plan = await next('pt-1.plan.1');
    await bus.settled();
    // At work: the step's request besides the keep-alive, one timer for its timeout and its host's heartbeat watch.
    expect(clock.pending()).toHaveLength(2);
    await control('pt-1', { action: 'pause' });
    paused(plan);
    await bus.settled();
    await heldAnHour({ clock, bus }, [KEEP_ALIVE_MS]);
    expect(bus.eventsOf('task.failed')).toHaveLength(0);

    await control('pt-1', { action: 'resume' });
    const again = await next('pt-1.plan.1');
    await bus.settled();
    expect(clock.pending()).toHaveLength(2);
    ok(again);
    ok(await next('pt-1.build.1'));
    await task.handled;
    await bus.settled();
    expect(clock.pending()).toEqual([]);
  });

  it('with pausedTimeCounts: true keeps one more while held, its deadline', async () => {
    const { intake, control, next, clock, bus } = await setUp(withDeadline(true));
    const task = intake.deliver({ id: 'pt-2', goal: 'build it' });
    const plan = await next('pt-2.plan.1');
    await control('pt-2', { action: 'pause' });
    paused(plan);
    await bus.settled();
    expect(clock.pending()).toEqual([KEEP_ALIVE_MS, 120_000]);
    clock.advance(120_000);
    await task.handled;
    expect(bus.eventsOf('task.failed')).toHaveLength(1);
    expect(clock.pending()).toEqual([]);
  });

  it('has none but the keep-alive held in a parallel step, both branches stopped for the pause', async () => {
    const { intake, control, next, clock, bus } = await setUp(
      pipeline([
        {
          id: 'fan',
          kind: 'parallel',
          branches: {
            a: [{ id: 'left', kind: 'agent', agent: 'planner' }],
            b: [{ id: 'right', kind: 'agent', agent: 'builder' }],
          },
        },
      ]),
    );
    const task = intake.deliver({ id: 'pt-3', goal: 'build it' });
    const [left, right] = [await next('pt-3.left.1'), await next('pt-3.right.1')];
    await control('pt-3', { action: 'pause' });
    paused(left);
    paused(right);
    await bus.settled();
    await heldAnHour({ clock, bus }, [KEEP_ALIVE_MS]);
    await control('pt-3', { action: 'resume' });
    ok(await next('pt-3.left.1'));
    ok(await next('pt-3.right.1'));
    await task.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
  });

  it('has none but the keep-alive held in a retry’s backoff, once the backoff has run out with nothing sent', async () => {
    const config = pipeline([{ id: 'plan', kind: 'agent', agent: 'planner', retry: { max: 2, backoff: 1 } }]);
    const { intake, control, next, sent, clock, bus } = await setUp(config);
    const task = intake.deliver({ id: 'pt-4', goal: 'build it' });
    const first = await next('pt-4.plan.1');
    first.respond({
      ok: false,
      stepId: first.value.stepId,
      error: { code: 'model_failed', message: 'bad answer' },
      usage,
      turns: 1,
    } as AgentStepReply);
    await bus.settled();
    await control('pt-4', { action: 'pause' });
    // The backoff's 1 s runs out while held; the retry waits unsent, with no timer of its own.
    clock.advance(KEEP_ALIVE_MS);
    await bus.settled();
    await heldAnHour({ clock, bus }, [KEEP_ALIVE_MS]);
    expect(sent).toHaveLength(1);
    await control('pt-4', { action: 'resume' });
    ok(await next('pt-4.plan.1-r1'));
    await task.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
  });

  it('has none but the keep-alive held while a human step’s question waits on the coordinator’s gate', async () => {
    const { intake, control, next, clock, bus, question, record, answer } = await setUpWithGate();
    const task = intake.deliver({ id: 'pt-5', goal: 'build it' });
    const q = await question();
    await bus.settled();
    // Asked: the question's 60 s besides the keep-alive, and the runner's passivation sweep (every 2.5 s by default).
    expect(clock.pending()).toEqual([PASSIVATION_SWEEP_MS, KEEP_ALIVE_MS, 60_000]);
    await control('pt-5', { action: 'pause' });
    await expect.poll(async () => (await record(q.id))?.held?.leftMs).toBe(60_000);
    await bus.settled();
    // Passivated 5 s in: asleep, it keeps no timer of its own; the sweep keeps its message alive.
    clock.advance(5_000);
    await bus.settled();
    await heldAnHour({ clock, bus }, [PASSIVATION_SWEEP_MS]);
    await control('pt-5', { action: 'resume' });
    await expect.poll(async () => (await record(q.id))?.held).toBeUndefined();
    await answer(q, 'yes');
    ok(await next('pt-5.build.1'));
    await task.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
  });
});
