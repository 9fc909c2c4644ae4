import { describe, expect, it } from 'vitest';
import { HOUR, ok, paused, pipeline, setUp, startRunner } from './support/steeringRunner.ts';

/** A step's own time (`defaults.stepTimeout` of the steering runner's pipelines): 60 s. */
const STEP_MS = 60_000;

const onePlan = pipeline([{ id: 'plan', kind: 'agent', agent: 'planner' }]);

/** The task taken up again from its record by another coordinator, on the first's bus, store and clock. */
async function takeOver(
  first: Awaited<ReturnType<typeof setUp>>,
  id: string,
  streamSequence: number,
  config = onePlan,
) {
  const { intake } = await startRunner(first, config);
  return intake.deliver({ id, goal: 'build it' }, { streamSequence, deliveryCount: 2 });
}

describe('a step held while its agent was at work, restored', () => {
  it('after the resume: sent again with the time it had left, the time held not counted', async () => {
    const first = await setUp(onePlan);
    const task = first.intake.deliver({ id: 'rs-1', goal: 'build it' });
    await first.next('rs-1.plan.1');
    first.clock.advance(20_000);
    await first.control('rs-1', { action: 'pause' });
    first.clock.advance(HOUR);
    await first.control('rs-1', { action: 'resume' });
    await first.bus.settled();
    // The coordinator stops (kill -9, say): another takes the task from its record. The step call's own changes are
    // checkpointed only with the workflow's, so the record holds the call as first sent; its resume holds the hour.
    await first.runner.stop();
    await task.handled;
    const again = await takeOver(first, 'rs-1', task.delivery.streamSequence);
    const plan = await first.next('rs-1.plan.1');
    expect(first.bus.eventsOf('task.failed')).toHaveLength(0);
    expect(plan.value.timeoutMs).toBe(STEP_MS - 20_000);
    ok(plan);
    await again.handled;
    expect(first.bus.eventsOf('task.completed')).toHaveLength(1);
  });

  it('from a checkpoint written while held, the task resumed before the crash: the time held not counted, then or at a later pause', async () => {
    const first = await setUp(onePlan);
    const task = first.intake.deliver({ id: 'rs-2', goal: 'build it' });
    await first.next('rs-2.plan.1');
    first.clock.advance(20_000);
    const pausedAt = first.clock.now();
    await first.control('rs-2', { action: 'pause' });
    await first.bus.settled();
    const held = await first.store.get('rs-2');
    first.clock.advance(HOUR);
    await first.control('rs-2', { action: 'resume' });
    await first.bus.settled();
    await first.runner.stop();
    await task.handled;
    // The resume was recorded, but no checkpoint let the step go: the record's workflow is the one written while the
    // step was held.
    const last = await first.store.get('rs-2');
    if (!held || !last) throw new Error('no record');
    // A workflow transition while the step was held (another branch's, say) would have checkpointed its hold too.
    const snapshot = structuredClone(held.value.snapshot) as {
      children: Record<string, { snapshot: { context: { heldSince?: number } } }>;
    };
    const call = snapshot.children['0.plan'];
    if (!call) throw new Error('no step call in the checkpoint');
    call.snapshot.context.heldSince = pausedAt;
    await first.store.put('rs-2', { ...last.value, snapshot });
    const again = await takeOver(first, 'rs-2', task.delivery.streamSequence);
    const plan = await first.next('rs-2.plan.1');
    expect(first.bus.eventsOf('task.failed')).toHaveLength(0);
    // The hour held is not the step's: it was let go as it went out again.
    expect(plan.value.timeoutMs).toBe(STEP_MS - 20_000);
    // 10 s at work, then held again for an hour: only 30 s are left once let go, not the hour it ran before.
    first.clock.advance(10_000);
    await first.control('rs-2', { action: 'pause' });
    first.clock.advance(HOUR);
    await first.control('rs-2', { action: 'resume' });
    await first.bus.settled();
    first.clock.advance(31_900);
    await first.bus.settled();
    expect(first.bus.eventsOf('task.failed')).toHaveLength(0);
    first.clock.advance(200);
    await again.handled;
    expect(first.bus.eventsOf('task.failed')[0]?.data.message).toContain('within the step timeout');
  });
});

const countsHeld = pipeline([{ id: 'plan', kind: 'agent', agent: 'planner' }], {
  budget: { timeout: 120, pausedTimeCounts: true },
});

describe('a held task whose held time counts against its deadline (budget.pausedTimeCounts), restored', () => {
  /** The task held with its step stopped for the pause, 20 s after it began, and its coordinator stopped. */
  const heldThenStopped = async (id: string) => {
    const first = await setUp(countsHeld);
    const task = first.intake.deliver({ id, goal: 'build it' });
    const plan = await first.next(`${id}.plan.1`);
    first.clock.advance(20_000);
    await first.control(id, { action: 'pause' });
    paused(plan);
    await first.bus.settled();
    await first.runner.stop();
    await task.handled;
    return { first, task };
  };

  it('after its deadline: ends at once, past its deadline', async () => {
    const { first, task } = await heldThenStopped('rd-1');
    first.clock.advance(HOUR);
    const again = await takeOver(first, 'rd-1', task.delivery.streamSequence, countsHeld);
    await first.bus.settled();
    first.clock.advance(0);
    await again.handled;
    expect(first.bus.eventsOf('task.failed')[0]?.data).toMatchObject({
      reason: 'budget_exceeded',
      step: 'plan',
    });
    expect(first.sent).toHaveLength(1);
  });

  it('before its deadline: ends at the deadline itself, not later and not sooner', async () => {
    const { first, task } = await heldThenStopped('rd-2');
    first.clock.advance(50_000);
    const again = await takeOver(first, 'rd-2', task.delivery.streamSequence, countsHeld);
    await expect.poll(async () => (await first.record('rd-2'))?.lease).toBeDefined();
    await first.bus.settled();
    // 70 s of the 120 gone: 50 s to go.
    first.clock.advance(49_999);
    await first.bus.settled();
    expect(first.bus.eventsOf('task.failed')).toHaveLength(0);
    first.clock.advance(1);
    await again.handled;
    expect(first.bus.eventsOf('task.failed')[0]?.data).toMatchObject({
      reason: 'budget_exceeded',
      step: 'plan',
    });
  });

  it('and resumed before its deadline: sent again with the deadline where it was', async () => {
    const { first, task } = await heldThenStopped('rd-3');
    const deadline = first.sent[0]?.budget?.deadline;
    first.clock.advance(30_000);
    const again = await takeOver(first, 'rd-3', task.delivery.streamSequence, countsHeld);
    await expect.poll(async () => (await first.record('rd-3'))?.paused).toBeDefined();
    await first.bus.settled();
    await first.control('rd-3', { action: 'resume' });
    const plan = await first.next('rd-3.plan.1');
    expect(plan.value.budget?.deadline).toBe(deadline);
    ok(plan);
    await again.handled;
    expect(first.bus.eventsOf('task.completed')).toHaveLength(1);
  });
});
