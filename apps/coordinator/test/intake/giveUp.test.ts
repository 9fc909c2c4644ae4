import { describe, expect, it } from 'vitest';
import { giveUp } from '../../src/intake/giveUp.ts';
import { intakeServices, triagedTask } from './taskServices.ts';

describe('giving up on a task', () => {
  it('records it failed with max_deliveries, dead-letters it, and has its message terminated', async () => {
    const { services, store, deadLetters } = intakeServices();
    const task = { ...triagedTask({ id: 'task-1', goal: 'g' }, { deliveryCount: 4 }), stalls: 3 };
    const result = await giveUp(services, task);
    expect(result).toMatchObject({
      next: 'conclude',
      settle: 'term',
      final: { kind: 'task.failed', data: { reason: 'max_deliveries' } },
    });
    expect((await store.get('task-1'))?.value).toMatchObject({
      status: 'failed',
      final: { kind: 'task.failed' },
    });
    expect(deadLetters).toEqual([
      {
        task: expect.objectContaining({ deliveries: 3 }),
        reason: { taskId: 'task-1', message: expect.stringContaining('delivered 3 times') },
      },
    ]);
  });

  it('hands the delivery back when another coordinator wrote the record since it was read', async () => {
    const { services, store, deadLetters } = intakeServices();
    const task = { ...triagedTask({ id: 'task-1', goal: 'g' }, { deliveryCount: 4 }), stalls: 3 };
    // Not read by triage, but there now: another coordinator claimed it meanwhile.
    await store.create('task-1', {
      taskId: 'task-1',
      pipeline: 'unit',
      streamSequence: 1,
      status: 'running',
      state: 'plan',
      goal: 'g',
      round: 1,
      usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
      createdAt: '2026-01-01T00:00:00.000Z',
      updatedAt: '2026-01-01T00:00:00.000Z',
    });
    expect(await giveUp(services, task)).toEqual({ next: 'handBack' });
    expect(deadLetters).toEqual([]);
    expect((await store.get('task-1'))?.value.status).toBe('running');
  });
});
