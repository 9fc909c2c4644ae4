import { getEventListeners } from 'node:events';
import { emptyUsage } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { conclude } from '../../src/intake/conclude.ts';
import { deliveryOf, intakeServices } from './taskServices.ts';

const scope = {
  pipeline: 'unit',
  taskId: 'task-1',
  traceparent: '00-0123456789abcdef0123456789abcdef-0123456789abcdef-01',
};

describe('concluding a task', () => {
  it('publishes its final event, closes its pending requests, and says it is settled', async () => {
    const { services, bus, closed, clock } = intakeServices();
    const final = services.finalEvents.failed(scope, 'internal', 'broke', emptyUsage(), 5);
    const delivery = deliveryOf({ id: 'task-1', goal: 'g' });
    // Last kept alive half the ack wait ago (keep-alives go every third of it): kept alive at once.
    const keptAliveAt = clock.now() - 1.5 * services.keepAliveMs;
    expect(await conclude(services, { delivery, final, keptAliveAt })).toBe('settled');
    expect(bus.events).toEqual([final]);
    expect(closed).toEqual(['task-1']);
    expect(delivery.keepAlives()).toBe(1);
  });

  it('reads no requests of a task that provably asked nobody', async () => {
    const { services, bus, closed, clock } = intakeServices();
    const final = services.finalEvents.failed(scope, 'step_failed', 'no', emptyUsage(), 5);
    const delivery = deliveryOf({ id: 'task-1', goal: 'g' });
    const keptAliveAt = clock.now();
    expect(await conclude(services, { delivery, final, keptAliveAt, askedNobody: true })).toBe('settled');
    expect(bus.events).toEqual([final]);
    expect(closed).toEqual([]);
  });

  it('keeps a message kept alive lately alive only a keep-alive interval on, should the end take that long', async () => {
    const { services, clock, stop } = intakeServices();
    services.bus.publishEvent = () => new Promise<boolean>(() => {});
    const final = services.finalEvents.failed(scope, 'internal', 'broke', emptyUsage(), 5);
    const delivery = deliveryOf({ id: 'task-1', goal: 'g' });
    const keptAliveAt = clock.now() - services.keepAliveMs;
    const concluding = conclude(services, { delivery, final, keptAliveAt });
    expect(delivery.keepAlives()).toBe(0);
    // At most half the ack wait and a third of it since the last: within the ack wait.
    clock.advance(services.keepAliveMs);
    expect(delivery.keepAlives()).toBe(1);
    stop();
    expect(await concluding).toBe('left');
  });

  it('leaves the message to a redelivery when the runner stops before the event is stored', async () => {
    const { services, closed, stop } = intakeServices();
    // An outbox that never stores the event (NATS out of reach).
    services.bus.publishEvent = () => new Promise<boolean>(() => {});
    const final = services.finalEvents.failed(scope, 'internal', 'broke', emptyUsage(), 5);
    const delivery = deliveryOf({ id: 'task-1', goal: 'g' });
    const concluding = conclude(services, { delivery, final, keptAliveAt: services.clock.now() });
    stop();
    expect(await concluding).toBe('left');
    expect(closed).toEqual([]);
  });

  it('leaves nothing waiting on the runner’s stop once a task has concluded: a runner’s life is many tasks', async () => {
    const { services } = intakeServices();
    for (let n = 0; n < 3; n++) {
      const final = services.finalEvents.failed(
        { ...scope, taskId: `task-${n}` },
        'internal',
        'broke',
        emptyUsage(),
        5,
      );
      await conclude(services, {
        delivery: deliveryOf({ id: `task-${n}`, goal: 'g' }),
        final,
        keptAliveAt: 0,
      });
    }
    expect(getEventListeners(services.stopped, 'abort')).toHaveLength(0);
  });

  it('leaves a message to a redelivery at once when the runner’s stop has already come', async () => {
    const { services, stop } = intakeServices();
    services.bus.publishEvent = () => new Promise<boolean>(() => {});
    stop();
    const final = services.finalEvents.failed(scope, 'internal', 'broke', emptyUsage(), 5);
    expect(
      await conclude(services, { delivery: deliveryOf({ id: 'task-1', goal: 'g' }), final, keptAliveAt: 0 }),
    ).toBe('left');
  });
});
