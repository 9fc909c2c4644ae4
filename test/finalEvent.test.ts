import { jetstream } from '@nats-io/jetstream';
import { BUCKETS, subjects, type TroupeEvent, WorkflowRecord } from '@troupe/protocol';
import { KvStore } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixturePath, type Harness, startHarness, startSecondCoordinator } from './support/harness.ts';

describe('a task whose coordinator died after recording its end', () => {
  let h: Harness;

  beforeAll(async () => {
    h = await startHarness([fixturePath('resume.yaml')]);
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('gets its stored final event published again, with the same id, when its message comes back', async () => {
    // The coordinator went away; the task's message is stored, unacknowledged, as after a crash.
    await h.coordinator.stop();
    const ack = await jetstream(h.client).publish(
      subjects.task('resume'),
      JSON.stringify({ id: 'ended-1', goal: 'already done' }),
    );
    const final: TroupeEvent = {
      id: 'final-event-of-ended-1',
      ts: new Date().toISOString(),
      kind: 'task.completed',
      pipeline: 'resume',
      taskId: 'ended-1',
      traceparent: '00-0123456789abcdef0123456789abcdef-0123456789abcdef-01',
      from: 'workflow',
      to: 'user',
      data: {
        output: 'done before the crash',
        rounds: 1,
        usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0, costUsd: 0, modelCalls: 1 },
        usageByAgent: {},
        durationMs: 5,
      },
    };
    const store = await KvStore.open(h.bus, BUCKETS.workflows, WorkflowRecord);
    await store.put('ended-1', {
      taskId: 'ended-1',
      pipeline: 'resume',
      streamSequence: ack.seq,
      status: 'completed',
      state: 'completed',
      goal: 'already done',
      round: 1,
      usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0, costUsd: 0, modelCalls: 1 },
      createdAt: new Date().toISOString(),
      updatedAt: new Date().toISOString(),
      final,
    });

    const next = await startSecondCoordinator(h, ['resume.yaml']);
    try {
      const published = await h.finalOf('ended-1', 15_000);
      expect(published).toMatchObject({ id: final.id, kind: 'task.completed' });
      // Not run again: nothing but the final event.
      expect(h.eventsOf('ended-1').map((e) => e.kind)).toEqual(['task.completed']);
    } finally {
      await next.stop();
    }
  });
});
