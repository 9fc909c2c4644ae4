import { cancelTask, readTask, submitTask, tellTask } from '@troupe/client';
import { subTaskId } from '@troupe/coordinator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixturePath, type Harness, ofKind, startHarness } from './support/harness.ts';

/** A message told to a task whose `pipeline` step is at work, over a real NATS: its sub-task's agent gets it. */
describe('a tell into a sub-pipeline', () => {
  let h: Harness;

  beforeAll(async () => {
    h = await startHarness(['waiting.yaml', 'slowpoke.yaml'].map(fixturePath));
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('is forwarded to the sub-task once, under a key made from the parent message, and kept by the parent until read', async () => {
    await submitTask(h.bus, 'waiting', { id: 'tell-sub-1', goal: 'Wait' });
    const child = subTaskId('tell-sub-1.slow.1');
    // The sub-task's agent is in its 30 s model call.
    await expect.poll(() => ofKind(h.eventsOf(child), 'step.started').length, { timeout: 30_000 }).toBe(1);

    const told = await tellTask(h.bus, 'tell-sub-1', 'use the v2 API', { by: 'ann' });
    expect(told.messageId).toBe('m-1');
    // A retry of the person's tell (same key) tells nothing new, to the parent or to the sub-task.
    await tellTask(h.bus, 'tell-sub-1', 'use the v2 API', { by: 'ann', key: told.key });
    await expect
      .poll(() => ofKind(h.eventsOf(child), 'task.told').map((e) => e.data), { timeout: 15_000 })
      .toEqual([{ messageId: 'm-1', text: 'use the v2 API', by: 'ann' }]);
    const sub = await readTask(h.bus, child);
    expect(sub.toldKeys).toEqual([{ key: 'parent:tell-sub-1:m-1', messageId: 'm-1' }]);
    expect(sub.told?.map((m) => m.text)).toEqual(['use the v2 API']);
    // The sub-task has not read it yet: the parent keeps it, for its next step should the sub-task not read it.
    expect((await readTask(h.bus, 'tell-sub-1')).told?.map((m) => m.id)).toEqual(['m-1']);
    expect(ofKind(h.eventsOf('tell-sub-1'), 'task.told')).toHaveLength(1);

    await cancelTask(h.bus, 'tell-sub-1', 'done looking');
    expect(await h.finalOf('tell-sub-1')).toMatchObject({ kind: 'task.cancelled' });
  });
});
