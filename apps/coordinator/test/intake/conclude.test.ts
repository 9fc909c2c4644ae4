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
    const { services, bus, closed } = intakeServices();
    const final = services.finalEvents.failed(scope, 'internal', 'broke', emptyUsage(), 5);
    const delivery = deliveryOf({ id: 'task-1', goal: 'g' });
    expect(await conclude(services, { delivery, final })).toBe('settled');
    expect(bus.events).toEqual([final]);
    expect(closed).toEqual(['task-1']);
    expect(delivery.keepAlives()).toBeGreaterThan(0);
  });

  it('leaves the message to a redelivery when the runner stops before the event is stored', async () => {
    const { services, closed, stop } = intakeServices();
    // An outbox that never stores the event (NATS out of reach).
    services.bus.publishEvent = () => new Promise<boolean>(() => {});
    const final = services.finalEvents.failed(scope, 'internal', 'broke', emptyUsage(), 5);
    const concluding = conclude(services, { delivery: deliveryOf({ id: 'task-1', goal: 'g' }), final });
    stop();
    expect(await concluding).toBe('left');
    expect(closed).toEqual([]);
  });
});
