import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixturePath, type Harness, kinds, publishTask, startHarness } from './support/harness.ts';

describe('faults that must not outlive their task or take the process down', () => {
  let h: Harness;

  beforeAll(async () => {
    h = await startHarness([
      fixturePath('timeboxed.yaml'),
      fixturePath('garbled.yaml'),
      fixturePath('slow.yaml'),
    ]);
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('stops an agent whose step timed out: nothing it would have done afterwards happens', async () => {
    publishTask(h, 'timeboxed', { id: 'late-1', goal: 'write late' });
    const final = await h.finalOf('late-1');
    expect(final.kind).toBe('task.failed');
    expect(final.kind === 'task.failed' && final.data.message).toContain('within the step timeout');
    // The model's reply was due 0.5 s after the timeout; wait past it.
    await new Promise((r) => setTimeout(r, 1_500));
    expect(kinds(h.eventsOf('late-1'))).not.toContain('tool.result');
    await expect(stat(join(h.workspaceRoot, 'timeboxed', 'late-1', 'too-late.md'))).rejects.toThrow();
  });

  it('survives an event that cannot be made, ends that task, and keeps serving others', async () => {
    publishTask(h, 'garbled', { id: 'garbled-1', goal: 'talk' });
    const final = await h.finalOf('garbled-1');
    expect(['task.completed', 'task.failed']).toContain(final.kind);
    publishTask(h, 'slow', { id: 'after-garble', goal: 'still here' });
    expect((await h.finalOf('after-garble')).kind).toBe('task.completed');
  });
});
