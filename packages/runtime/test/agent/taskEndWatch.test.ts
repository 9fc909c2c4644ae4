import { emptyUsage, type TaskEnding } from '@troupe/protocol';
import { MemoryBus, SimulatedClock } from '@troupe/testkit';
import { describe, expect, it } from 'vitest';
import { watchTaskEnds } from '../../src/agent/taskEndWatch.ts';
import { EventFactory } from '../../src/events/eventFactory.ts';

const scope = (taskId: string) => ({
  pipeline: 'demo',
  taskId,
  traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
});

describe('the watch on tasks’ final events', () => {
  it('stops the steps of a task that completed, failed or was cancelled, saying how it ended', async () => {
    const clock = new SimulatedClock();
    const bus = new MemoryBus({ clock });
    const events = new EventFactory(clock);
    const ended: [string, TaskEnding][] = [];
    const subscriptions = watchTaskEnds(bus, 'demo', { size: 1, endTask: (...args) => ended.push(args) });
    const usage = emptyUsage();
    await bus.publishEvent(events.make('task.cancelled', scope('t1'), { usage }));
    await bus.publishEvent(
      events.make('task.failed', scope('t2'), {
        reason: 'budget_exceeded',
        message: 'spent',
        usage,
        durationMs: 1,
      }),
    );
    await bus.publishEvent(
      events.make('task.completed', scope('t3'), {
        output: 'done',
        rounds: 1,
        usage,
        usageByAgent: {},
        durationMs: 1,
      }),
    );
    await bus.settled();
    expect(ended).toEqual([
      ['t1', { status: 'cancelled' }],
      ['t2', { status: 'failed', reason: 'budget_exceeded' }],
      ['t3', { status: 'completed' }],
    ]);
    for (const subscription of subscriptions) subscription.unsubscribe();
  });

  it('reads nothing while no step runs here', async () => {
    const clock = new SimulatedClock();
    const bus = new MemoryBus({ clock });
    const ended: string[] = [];
    watchTaskEnds(bus, 'demo', { size: 0, endTask: (taskId) => ended.push(taskId) });
    await bus.publishEvent(
      new EventFactory(clock).make('task.cancelled', scope('t1'), { usage: emptyUsage() }),
    );
    await bus.settled();
    expect(ended).toEqual([]);
  });
});
