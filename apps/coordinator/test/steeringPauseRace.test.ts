import { describe, expect, it } from 'vitest';
import { HOUR, ok, pipeline, setUp } from './support/steeringRunner.ts';

const countsHeld = pipeline(
  [
    { id: 'plan', kind: 'agent', agent: 'planner' },
    { id: 'build', kind: 'agent', agent: 'builder' },
  ],
  { budget: { timeout: 120, pausedTimeCounts: true } },
);

describe('a pause racing its step’s final reply', () => {
  it('keeps the reply once: the step completes, is not sent again, and the next step waits for the resume', async () => {
    const { intake, control, next, clock, bus, sent } = await setUp(countsHeld);
    const task = intake.deliver({ id: 'pr-1', goal: 'build it' });
    const plan = await next('pr-1.plan.1');
    // The reply and the pause cross: neither waits for the other.
    ok(plan, 'planned');
    const pausing = control('pr-1', { action: 'pause' });
    await pausing;
    await bus.settled();
    clock.advance(60_000);
    await bus.settled();
    expect(bus.eventsOf('step.completed').filter((e) => e.data.step === 'plan')).toHaveLength(1);
    expect(sent.map((s) => s.stepId)).toEqual(['pr-1.plan.1']);
    await control('pr-1', { action: 'resume' });
    ok(await next('pr-1.build.1'));
    await task.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
    expect(sent.map((s) => s.stepId)).toEqual(['pr-1.plan.1', 'pr-1.build.1']);
  });

  it('held at work past the deadline while its reply is on its way: the task ends once, at the deadline', async () => {
    const { intake, control, next, clock, bus } = await setUp(countsHeld);
    const task = intake.deliver({ id: 'pr-2', goal: 'build it' });
    const plan = await next('pr-2.plan.1');
    await control('pr-2', { action: 'pause' });
    clock.advance(120_000);
    // Its agent's reply comes just as the deadline ends the step.
    ok(plan, 'planned');
    await task.handled;
    await bus.settled();
    clock.advance(HOUR);
    await bus.settled();
    expect(bus.eventsOf('task.failed')).toHaveLength(1);
    expect(bus.eventsOf('task.completed')).toHaveLength(0);
  });
});
