import { cancelTask, readTask, submitTask } from '@troupe/coordinator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixturePath, type Harness, ofKind, startHarness } from './support/harness.ts';

/** `kind: pipeline`: a pipeline run as a step of another, over a real NATS. */
describe('a pipeline as a step', () => {
  let h: Harness;

  beforeAll(async () => {
    h = await startHarness(
      ['nesting.yaml', 'outline.yaml', 'waiting.yaml', 'slowpoke.yaml', 'recursive.yaml'].map(fixturePath),
    );
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('runs the sub-pipeline as a task of its own, linked to its parent, its result the step’s output', async () => {
    await submitTask(h.bus, 'nesting', { id: 'nest-1', goal: 'Write the chapter' });
    const final = await h.finalOf('nest-1');
    expect(final).toMatchObject({ kind: 'task.completed', data: { output: 'wrapped' } });
    const child = 'nest-1-sub-1';
    const accepted = ofKind(h.eventsOf(child), 'task.accepted')[0];
    expect(accepted).toMatchObject({
      pipeline: 'outline',
      from: 'task:nest-1',
      data: {
        goal: 'Outline the chapter',
        parent: { taskId: 'nest-1', pipeline: 'nesting', step: 'sub', depth: 1 },
      },
    });
    // The child's input carries what the steps before it produced; its trace is its parent's.
    expect(accepted?.data.input).toEqual({ context: { prep: 'prepared' } });
    const parentTrace = ofKind(h.eventsOf('nest-1'), 'task.accepted')[0]?.traceparent.split('-')[1];
    expect(accepted?.traceparent.split('-')[1]).toBe(parentTrace);
    const sub = ofKind(h.eventsOf('nest-1'), 'step.completed').find((e) => e.data.step === 'sub');
    expect(sub?.data).toMatchObject({ ok: true, agent: 'pipeline', output: '1. Intro 2. Body 3. End' });
    // The child's usage counts in the parent's.
    const parent = await readTask(h.bus, 'nest-1');
    expect(parent.usage.modelCalls).toBe(3);
  });

  it('cancels the sub-task when its parent is cancelled', async () => {
    await submitTask(h.bus, 'waiting', { id: 'wait-1', goal: 'Wait' });
    await expect
      .poll(() => ofKind(h.eventsOf('wait-1-slow-1'), 'step.started').length, { timeout: 30_000 })
      .toBe(1);
    await cancelTask(h.bus, 'wait-1', 'no longer needed');
    expect(await h.finalOf('wait-1')).toMatchObject({ kind: 'task.cancelled' });
    expect(await h.finalOf('wait-1-slow-1')).toMatchObject({
      kind: 'task.cancelled',
      data: { reason: 'its parent task wait-1 cancelled' },
    });
  });

  it('ends a pipeline that runs itself at the depth bound, saying so', async () => {
    await submitTask(h.bus, 'recursive', { id: 'rec', goal: 'Again' });
    const final = await h.finalOf('rec', 60_000);
    expect(final).toMatchObject({ kind: 'task.failed', data: { reason: 'step_failed', step: 'again' } });
    expect((final.data as { message: string }).message).toContain('pipelines nest at most 5 deep');
    // Five levels of sub-tasks ran, and none deeper.
    const levels = h.events.filter((e) => e.kind === 'task.accepted' && e.pipeline === 'recursive').length;
    expect(levels).toBe(6);
  });
});
