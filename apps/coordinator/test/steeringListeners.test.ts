import { afterEach, describe, expect, it, vi } from 'vitest';
import { TaskSteering } from '../src/task/taskSteering.ts';
import { ok, paused, pipeline, setUp } from './support/steeringRunner.ts';

afterEach(() => {
  vi.restoreAllMocks();
});

/** Counts the listeners on every task's steering that are still listening, however each stops (its closure or unlisten). */
function countListeners() {
  const live = new Set<unknown>();
  const { listen, unlisten } = TaskSteering.prototype;
  vi.spyOn(TaskSteering.prototype, 'listen').mockImplementation(function (this: TaskSteering, listener) {
    live.add(listener);
    return listen.call(this, listener);
  });
  vi.spyOn(TaskSteering.prototype, 'unlisten').mockImplementation(function (this: TaskSteering, listener) {
    live.delete(listener);
    unlisten.call(this, listener);
  });
  return () => live.size;
}

const STEPS = 12;
const long = pipeline(
  Array.from({ length: STEPS }, (_, i) => ({
    id: `s${i}`,
    kind: 'agent',
    agent: i % 2 ? 'builder' : 'planner',
  })),
);

describe('a long task paused and resumed at each step', () => {
  it('leaves no listener on its steering per finished step or request', async () => {
    const live = countListeners();
    const { intake, control, next, bus } = await setUp(long);
    const task = intake.deliver({ id: 'ls-1', goal: 'build it' });
    const atWork: number[] = [];
    for (let i = 0; i < STEPS; i++) {
      const step = await next(`ls-1.s${i}.1`);
      await bus.settled();
      atWork.push(live());
      // Held at work, let go, held again and stopped for it, resumed: each kind of hold once a step.
      await control('ls-1', { action: 'pause' });
      await control('ls-1', { action: 'resume' });
      await control('ls-1', { action: 'pause' });
      paused(step);
      await bus.settled();
      await control('ls-1', { action: 'resume' });
      ok(await next(`ls-1.s${i}.1`));
    }
    await task.handled;
    // As many listen while the last step works as while the first did.
    expect(atWork[0]).toBeGreaterThan(0);
    expect(new Set(atWork).size).toBe(1);
    expect(live()).toBe(0);
  });
});
