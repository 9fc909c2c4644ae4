import { cancelTask, readTask, submitTask } from '@troupe/client';
import { subTaskId } from '@troupe/coordinator';
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
    const child = subTaskId('nest-1.sub.1');
    expect(child).toMatch(/^nest-1-sub-1-[A-Za-z0-9]{6}$/);
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
    const child = subTaskId('wait-1.slow.1');
    await expect.poll(() => ofKind(h.eventsOf(child), 'step.started').length, { timeout: 30_000 }).toBe(1);
    await cancelTask(h.bus, 'wait-1', 'no longer needed');
    expect(await h.finalOf('wait-1')).toMatchObject({ kind: 'task.cancelled' });
    expect(await h.finalOf(child)).toMatchObject({
      kind: 'task.cancelled',
      // Whichever comes first: the parent's step, left, cancels it; so does the parent's final event.
      data: {
        reason: expect.stringMatching(/^its parent (task wait-1 cancelled|step wait-1\/slow was left)$/),
      },
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

  it('cancels a sub-task that starts only after its parent has ended', async () => {
    // One slowpoke task at a time: a blocker holds the slot, so the sub-task waits in the queue.
    const one = await startHarness(['waiting.yaml', 'slowpoke.yaml'].map(fixturePath), { concurrency: 1 });
    try {
      await submitTask(one.bus, 'slowpoke', { id: 'blocker', goal: 'Hold the slot' });
      await expect
        .poll(() => ofKind(one.eventsOf('blocker'), 'step.started').length, { timeout: 30_000 })
        .toBe(1);
      await submitTask(one.bus, 'waiting', { id: 'wait-2', goal: 'Wait' });
      await expect
        .poll(() => ofKind(one.eventsOf('wait-2'), 'step.started').length, { timeout: 30_000 })
        .toBe(1);
      await cancelTask(one.bus, 'wait-2', 'no longer needed');
      expect(await one.finalOf('wait-2')).toMatchObject({ kind: 'task.cancelled' });
      // The slot frees; the sub-task starts, finds its parent ended, and ends too. (On a loaded machine the
      // sub-task may have been taken up before the parent's step was left: then that cancels it.)
      await cancelTask(one.bus, 'blocker');
      const child = subTaskId('wait-2.slow.1');
      expect(await one.finalOf(child, 30_000)).toMatchObject({
        kind: 'task.cancelled',
        data: {
          reason: expect.stringMatching(/^its parent (task wait-2 cancelled|step wait-2\/slow was left)$/),
        },
      });
      // Its first step was stopped as it began: it finished nothing.
      expect(ofKind(one.eventsOf(child), 'step.completed').filter((e) => e.data.ok)).toHaveLength(0);
    } finally {
      await one.stop();
    }
  }, 90_000);
});
