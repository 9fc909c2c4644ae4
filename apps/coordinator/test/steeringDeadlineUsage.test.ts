import { describe, expect, it } from 'vitest';
import { paused, pipeline, setUp, usage } from './support/steeringRunner.ts';

const countsHeld = pipeline([{ id: 'plan', kind: 'agent', agent: 'planner' }], {
  budget: { timeout: 120, pausedTimeCounts: true },
});

describe('a step ended at the deadline while held (budget.pausedTimeCounts)', () => {
  it('keeps what its agent spent before it stopped for the pause: the task’s usage does not undercount it', async () => {
    const { intake, control, next, clock, bus } = await setUp(countsHeld);
    const task = intake.deliver({ id: 'du-1', goal: 'build it' });
    const plan = await next('du-1.plan.1');
    await control('du-1', { action: 'pause' });
    // Its agent made a model call, then stopped for the pause, and said what it spent.
    paused(plan, { usage: { ...usage, costUsd: 0.25 }, turns: 1 });
    await bus.settled();
    clock.advance(120_000);
    await task.handled;
    const failed = bus.eventsOf('task.failed')[0]?.data;
    expect(failed).toMatchObject({ reason: 'budget_exceeded', step: 'plan' });
    expect(failed?.usage).toMatchObject({ modelCalls: 1, costUsd: 0.25, inputTokens: 2, outputTokens: 1 });
  });
});
