import { type AgentStepRequest, subjects, type ToldMessage } from '@troupe/protocol';
import { MemoryBus, SimulatedClock } from '@troupe/testkit';
import { describe, expect, it } from 'vitest';
import { RecentSteering } from '../../src/agent/recentSteering.ts';
import { watchSteering } from '../../src/agent/steeringWatch.ts';
import { EventFactory } from '../../src/events/eventFactory.ts';

const scope = (taskId: string) => ({
  pipeline: 'demo',
  taskId,
  traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
});

function watched() {
  const clock = new SimulatedClock();
  const bus = new MemoryBus({ clock });
  const events = new EventFactory({ now: () => Date.UTC(2026, 11, 6, 18) });
  const paused: [string, number][] = [];
  const resumed: [string, number | undefined][] = [];
  const told: [string, ToldMessage][] = [];
  const subscriptions = watchSteering(bus, 'demo', {
    pauseTask: (taskId, since) => paused.push([taskId, since]),
    resumeTask: (taskId, since) => resumed.push([taskId, since]),
    tellTask: (taskId, message) => told.push([taskId, message]),
  });
  return { bus, events, paused, resumed, told, subscriptions };
}

describe('the watch on pauses and told messages', () => {
  it('hands a pause, a resume and a told message to the steps of their task, with one subscription per kind', async () => {
    const { bus, events, paused, resumed, told, subscriptions } = watched();
    expect(subscriptions).toHaveLength(3);
    await bus.publishEvent(events.make('task.paused', scope('t1'), { state: 'work', round: 1, by: 'ann' }));
    const since = '2026-12-06T17:59:00.000Z';
    await bus.publishEvent(events.make('task.paused', scope('t3'), { state: 'work', round: 1, since }));
    await bus.publishEvent(
      events.make('task.resumed', scope('t3'), {
        state: 'work',
        round: 1,
        deliveries: 1,
        after: 'pause',
        pausedMs: 60_000,
        since,
      }),
    );
    // A resume after a redelivery ends no pause.
    await bus.publishEvent(
      events.make('task.resumed', scope('t4'), {
        state: 'work',
        round: 1,
        deliveries: 2,
        after: 'redelivery',
      }),
    );
    await bus.publishEvent(
      events.make('task.told', scope('t2'), { messageId: 'm1', text: 'use v2', by: 'ann' }),
    );
    await bus.publishEvent(events.make('task.told', scope('t2'), { messageId: 'm2', text: 'and cite it' }));
    await bus.settled();
    // When each pause began: its `since`, else when it was published.
    expect(paused).toEqual([
      ['t1', Date.UTC(2026, 11, 6, 18)],
      ['t3', Date.parse(since)],
    ]);
    expect(resumed).toEqual([['t3', Date.parse(since)]]);
    expect(told).toEqual([
      ['t2', { id: 'm1', text: 'use v2', by: 'ann', at: '2026-12-06T18:00:00.000Z' }],
      ['t2', { id: 'm2', text: 'and cite it', at: '2026-12-06T18:00:00.000Z' }],
    ]);
    for (const subscription of subscriptions) subscription.unsubscribe();
    expect(bus.hasListener(subjects.event('demo', 't1', 'task.paused'))).toBe(false);
  });

  it('gives a told message a restored task published again (`again`) to no step at work and not to its memory', async () => {
    const clock = new SimulatedClock();
    const bus = new MemoryBus({ clock });
    const events = new EventFactory({ now: () => Date.UTC(2026, 11, 6, 18) });
    const steering = new RecentSteering(clock);
    const atWork: [string, ToldMessage][] = [];
    const subscriptions = watchSteering(bus, 'demo', {
      pauseTask: () => {},
      resumeTask: () => {},
      // As the host's steps in flight do: the memory hears it, then each run of the task.
      tellTask: (taskId, message) => {
        steering.told(taskId, message);
        atWork.push([taskId, message]);
      },
    });
    await bus.publishEvent(
      events.make('task.told', scope('t1'), { messageId: 'm1', text: 'use v2', by: 'ann', again: true }),
    );
    await bus.publishEvent(events.make('task.told', scope('t1'), { messageId: 'm2', text: 'and cite it' }));
    await bus.settled();
    expect(atWork.map(([taskId, { id }]) => [taskId, id])).toEqual([['t1', 'm2']]);
    // A request sent before either and on its way is given only the first-time one from the memory.
    const request: AgentStepRequest = {
      stepId: 't1.work.1',
      taskId: 't1',
      pipeline: 'demo',
      agent: 'worker',
      step: 'work',
      round: 1,
      goal: 'g',
      context: [],
      expect: 'text',
      sentAt: Date.UTC(2026, 11, 6, 17),
    };
    expect(steering.missedBy(request)?.told.map(({ id }) => id)).toEqual(['m2']);
    for (const subscription of subscriptions) subscription.unsubscribe();
  });

  it('passes over what is not such an event', async () => {
    const busy = watched();
    busy.bus.publish(subjects.event('demo', 't1', 'task.told'), { kind: 'task.told', data: {} });
    // An event published on another task's subject than its own is not that task's.
    const event = busy.events.make('task.paused', scope('t1'), { state: 'work', round: 1 });
    busy.bus.publish(subjects.event('demo', 't2', 'task.paused'), event);
    await busy.bus.settled();
    expect(busy.paused).toEqual([]);
    expect(busy.told).toEqual([]);
  });
});
