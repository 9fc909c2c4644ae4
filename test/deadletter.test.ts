import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  eventOf,
  fixturePath,
  type Harness,
  kinds,
  publishTask,
  startHarness,
  startSecondCoordinator,
} from './support/harness.ts';

// Crashes count towards maxDeliver and end in the dead-letter stream: see test/crash.test.ts (kill -9).
describe('a task handed back at shutdown', () => {
  let h: Harness;

  beforeAll(async () => {
    h = await startHarness([fixturePath('resume.yaml')], { maxDeliver: 1 });
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('is resumed, not given up on: a clean stop is not a failed delivery', async () => {
    publishTask(h, 'resume', { id: 'handed-back', goal: 'survive a clean stop' });
    await eventOf(h, 'handed-back', 'step.started');
    // Delivery 1 of the 1 allowed ends in a hand-back; delivery 2 still runs.
    await h.coordinator.stop();
    const next = await startSecondCoordinator(h, ['resume.yaml'], { maxDeliver: 1 });
    try {
      expect((await h.finalOf('handed-back', 30_000)).kind).toBe('task.completed');
      expect(kinds(h.eventsOf('handed-back'))).toContain('task.resumed');
    } finally {
      await next.stop();
    }
  });
});
