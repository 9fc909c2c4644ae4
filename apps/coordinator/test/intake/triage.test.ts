import type { WorkflowRecord } from '@troupe/protocol';
import { emptyUsage } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { triage } from '../../src/intake/triage.ts';
import { deliveryOf, intakeServices } from './taskServices.ts';

const running = (over: Partial<WorkflowRecord> = {}): WorkflowRecord => ({
  taskId: 'task-1',
  pipeline: 'unit',
  streamSequence: 1,
  status: 'running',
  state: 'plan',
  goal: 'g',
  round: 1,
  usage: emptyUsage(),
  createdAt: '2026-01-01T00:00:00.000Z',
  updatedAt: '2026-01-01T00:00:00.000Z',
  lease: 'someone',
  progress: 2,
  delivery: { progress: 2, stalls: 0 },
  ...over,
});

describe('triage', () => {
  it('claims a new task without reading its record', async () => {
    const { services, store } = intakeServices();
    const result = await triage(services, deliveryOf({ id: 'task-1', goal: 'plan it' }));
    expect(result).toMatchObject({ next: 'claim', task: { taskId: 'task-1', stalls: 0, entry: undefined } });
    expect(await store.get('task-1')).toBeUndefined();
  });

  it('refuses a payload that is not a task, reporting why on _invalid', async () => {
    const { services, bus } = intakeServices();
    expect(await triage(services, deliveryOf('{"goal": 42}'))).toEqual({ next: 'refuse' });
    await bus.settled();
    const reported = bus.messages.find((m) => m.subject === 'troupe.events._invalid');
    expect(JSON.parse(reported?.data ?? '{}')).toMatchObject({
      reason: expect.stringContaining('task for pipeline unit refused'),
      pipeline: 'unit',
    });
  });

  it('takes the task id from Nats-Msg-Id, else derives one from the stream message', async () => {
    const { services } = intakeServices();
    const named = await triage(
      services,
      deliveryOf({ goal: 'g' }, { headers: { 'Nats-Msg-Id': 'from-header' } }),
    );
    expect(named).toMatchObject({ next: 'claim', task: { taskId: 'from-header' } });
    const derived = await triage(services, deliveryOf({ goal: 'g' }, { streamSequence: 7 }));
    expect(derived).toMatchObject({
      next: 'claim',
      task: { taskId: `t7-${Date.UTC(2026, 0, 1).toString(36)}` },
    });
  });

  it('hands the delivery back while the runner stops', async () => {
    const { services, stop } = intakeServices();
    stop();
    expect(await triage(services, deliveryOf({ id: 'task-1', goal: 'g' }))).toEqual({ next: 'handBack' });
  });

  it('leaves a redelivery of a task whose actor runs here', async () => {
    const { services } = intakeServices();
    services.signals.listen({ taskId: 'task-1', deliver: () => {} });
    expect(await triage(services, deliveryOf({ id: 'task-1', goal: 'g' }, { deliveryCount: 2 }))).toEqual({
      next: 'leave',
    });
  });

  it('acks a resubmission of a task id another message took', async () => {
    const { services, store } = intakeServices();
    await store.create('task-1', running({ streamSequence: 1 }));
    const again = deliveryOf({ id: 'task-1', goal: 'g' }, { streamSequence: 2, deliveryCount: 2 });
    expect(await triage(services, again)).toEqual({ next: 'ack' });
  });

  it('concludes an ended task delivered again with its stored final event, dead-lettering a given-up one again', async () => {
    const { services, store, deadLetters } = intakeServices();
    const final = services.finalEvents.failed(
      {
        pipeline: 'unit',
        taskId: 'task-1',
        traceparent: '00-0123456789abcdef0123456789abcdef-0123456789abcdef-01',
      },
      'max_deliveries',
      'given up',
      emptyUsage(),
      0,
    );
    await store.create('task-1', running({ status: 'failed', state: 'failed', final }));
    const result = await triage(services, deliveryOf({ id: 'task-1', goal: 'g' }, { deliveryCount: 3 }));
    expect(result).toEqual({ next: 'conclude', final });
    expect(deadLetters).toEqual([
      { task: expect.objectContaining({ deliveries: 3 }), reason: { taskId: 'task-1', message: 'given up' } },
    ]);
  });

  it('gives up on a task delivered maxDeliver times in a row without progress', async () => {
    const { services, store } = intakeServices({ maxDeliver: 3 });
    await store.create('task-1', running({ progress: 2, delivery: { progress: 2, stalls: 2 } }));
    const result = await triage(services, deliveryOf({ id: 'task-1', goal: 'g' }, { deliveryCount: 4 }));
    expect(result).toMatchObject({ next: 'giveUp', task: { taskId: 'task-1', stalls: 3 } });
  });

  it('does not count a delivery handed back at a stop as a stall', async () => {
    const { services, store } = intakeServices({ maxDeliver: 3 });
    await store.create('task-1', running({ delivery: { progress: 2, stalls: 2, handedBack: true } }));
    const result = await triage(services, deliveryOf({ id: 'task-1', goal: 'g' }, { deliveryCount: 4 }));
    expect(result).toMatchObject({ next: 'claim', task: { stalls: 2 } });
  });
});
