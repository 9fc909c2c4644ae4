import { subjects, type ToldMessage } from '@troupe/protocol';
import { MemoryBus, SimulatedClock } from '@troupe/testkit';
import { describe, expect, it } from 'vitest';
import { watchSteering } from '../../src/agent/steeringWatch.ts';
import { EventFactory } from '../../src/events/eventFactory.ts';

const scope = (taskId: string) => ({
  pipeline: 'demo',
  taskId,
  traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
});

function watched(size: number) {
  const clock = new SimulatedClock();
  const bus = new MemoryBus({ clock });
  const events = new EventFactory({ now: () => Date.UTC(2026, 11, 6, 18) });
  const paused: string[] = [];
  const told: [string, ToldMessage][] = [];
  const subscriptions = watchSteering(bus, 'demo', {
    size,
    pauseTask: (taskId) => paused.push(taskId),
    tellTask: (taskId, message) => told.push([taskId, message]),
  });
  return { bus, events, paused, told, subscriptions };
}

describe('the watch on pauses and told messages', () => {
  it('hands a pause and a told message to the steps of their task, with one subscription per kind', async () => {
    const { bus, events, paused, told, subscriptions } = watched(1);
    expect(subscriptions).toHaveLength(2);
    await bus.publishEvent(events.make('task.paused', scope('t1'), { state: 'work', round: 1, by: 'ann' }));
    await bus.publishEvent(
      events.make('task.told', scope('t2'), { messageId: 'm1', text: 'use v2', by: 'ann' }),
    );
    await bus.publishEvent(events.make('task.told', scope('t2'), { messageId: 'm2', text: 'and cite it' }));
    await bus.settled();
    expect(paused).toEqual(['t1']);
    expect(told).toEqual([
      ['t2', { id: 'm1', text: 'use v2', by: 'ann', at: '2026-12-06T18:00:00.000Z' }],
      ['t2', { id: 'm2', text: 'and cite it', at: '2026-12-06T18:00:00.000Z' }],
    ]);
    for (const subscription of subscriptions) subscription.unsubscribe();
    expect(bus.hasListener(subjects.event('demo', 't1', 'task.paused'))).toBe(false);
  });

  it('reads nothing while no step runs here, and passes over what is not such an event', async () => {
    const idle = watched(0);
    await idle.bus.publishEvent(idle.events.make('task.paused', scope('t1'), { state: 'work', round: 1 }));
    await idle.bus.settled();
    expect(idle.paused).toEqual([]);

    const busy = watched(1);
    busy.bus.publish(subjects.event('demo', 't1', 'task.told'), { kind: 'task.told', data: {} });
    // An event published on another task's subject than its own is not that task's.
    const event = busy.events.make('task.paused', scope('t1'), { state: 'work', round: 1 });
    busy.bus.publish(subjects.event('demo', 't2', 'task.paused'), event);
    await busy.bus.settled();
    expect(busy.paused).toEqual([]);
    expect(busy.told).toEqual([]);
  });
});
