import { reusePlan } from '@troupe/client';
import { emptyUsage, type TroupeEvent } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { reuseOfItem } from '../src/workflow/reusedStep.ts';
import type { WorkflowEmitted, WorkflowInput } from '../src/workflow/workflowTypes.ts';
import { everyKind, everyKindOptions, everyKindScript } from './support/everyKind.ts';
import { ofKind, run, task } from './support/runFlow.ts';

/** The original run of every step kind, to restart or fork: its events, as EVENTS would hold them. */
async function original() {
  const ran = await run(everyKind, everyKindScript, everyKindOptions);
  const events = ran.events.map(
    (e: WorkflowEmitted, i): TroupeEvent =>
      ({ id: `e${i}`, ts: '', pipeline: 'demo', taskId: task.taskId, ...e }) as unknown as TroupeEvent,
  );
  return { ...ran, events };
}

/** The new task of a restart or fork from `step` of the original, with what it reuses read from its events. */
async function restarted(step: string, set?: Record<string, string>) {
  const { events } = await original();
  const plan = reusePlan(events, { taskId: task.taskId, step, ...(set ? { set } : {}) });
  if (!plan.ok) throw new Error(plan.message);
  const input: WorkflowInput = {
    ...task,
    taskId: 'task-2',
    origin: { taskId: task.taskId, kind: set ? 'fork' : 'restart', step },
    reuse: plan.steps,
  };
  return { input, reuse: plan.steps };
}

const completedSteps = (events: WorkflowEmitted[]) =>
  ofKind(events, 'step.completed').map((e) => e.data as { step: string; reused?: boolean; usage: unknown });

describe('a restart reuses the steps its origin completed before the step it runs from', () => {
  it('from the last step: no agent before it is asked, nobody asked, no sub-task submitted, the router chooses as before', async () => {
    const before = await original();
    const { input } = await restarted('close');
    const again = await run(everyKind, everyKindScript, { ...everyKindOptions, input });
    expect(again.output.status).toBe('completed');
    // Only the closer runs; the sub-pipeline step names the original's sub-tasks, whose outputs it reused.
    expect(again.requests.map((r) => r.request.agent)).toEqual(['closer']);
    expect(again.asked).toEqual([]);
    expect(again.submitted).toEqual([]);
    expect(before.submitted).toHaveLength(2);
    expect(
      ofKind(again.events, 'step.started')
        .filter((e) => e.data.step === 'sub')
        .map((e) => e.data.subTask),
    ).toEqual(before.submitted.map((s) => ({ taskId: s.task.id, pipeline: 'outline' })));
    // The route went the same way, and the review's rejection was reused with its output: two rounds again.
    expect(ofKind(again.events, 'route.chosen').map((e) => e.data)).toEqual(
      before.events.filter((e) => e.kind === 'route.chosen').map((e) => e.data),
    );
    expect(again.output.rounds).toBe(before.output.rounds);
    // The closer sees what it saw in the original, the sub-task's output too, and says the same.
    const seen = (context: { step: string; output: string }[] | undefined) =>
      context?.map((c) => `${c.step}=${c.output}`);
    expect(seen(again.calls('closer')[0]?.context)).toEqual(seen(before.calls('closer')[0]?.context));
    expect(again.output.output).toBe(before.output.output);
  });

  it('marks each reused step completed as reused, with nothing spent; the task counts only what ran', async () => {
    const { input } = await restarted('close');
    const again = await run(everyKind, everyKindScript, { ...everyKindOptions, input });
    const reused = completedSteps(again.events).filter((c) => c.reused);
    expect(reused.map((c) => c.step)).toEqual(
      expect.arrayContaining(['plan', 'build', 'left', 'ask', 'right', 'part', 'sub', 'choose', 'check']),
    );
    for (const c of reused) expect(c.usage).toEqual(emptyUsage());
    expect(
      completedSteps(again.events)
        .filter((c) => !c.reused)
        .map((c) => c.step),
    ).toEqual(['close']);
    // What the reused steps' agents spent stays the original's: the new task counts nothing of it.
    for (const agent of ['planner', 'builder', 'lefty', 'righty', 'worker', 'router', 'reviewer']) {
      expect(again.output.usageByAgent[agent] ?? emptyUsage()).toEqual(emptyUsage());
    }
    expect(again.output.usageByAgent.closer?.modelCalls).toBe(1);
  });

  it('from the review: the steps after it run again, from its first round on; the ones before it do not', async () => {
    const { input } = await restarted('check');
    const again = await run(everyKind, everyKindScript, { ...everyKindOptions, input });
    expect(again.output.status).toBe('completed');
    const ran = again.requests.map((r) => r.request.stepId);
    expect(ran).toContain('task-2.check.1');
    // The rejection sends the work back to build: its round 2 runs, round 1 was reused.
    expect(ran).toContain('task-2.build.2');
    expect(ran).not.toContain('task-2.build.1');
    expect(again.calls('planner')).toEqual([]);
    expect(again.calls('worker').every((r) => r.round === 2)).toBe(true);
    // The person was asked only in round 2.
    expect(again.asked.map((a) => a.stepId)).toEqual(['task-2.ask.2']);
  });

  it('a fork that sets an earlier output: the steps after it see the edit, and a foreach runs on its new list', async () => {
    const edited = JSON.stringify({ parts: ['z'], kind: 'y' });
    const { input, reuse } = await restarted('build', { plan: edited });
    expect(reuse['plan.1']).toMatchObject({ output: edited, edited: true });
    const again = await run(everyKind, everyKindScript, { ...everyKindOptions, input });
    expect(again.calls('planner')).toEqual([]);
    expect(again.calls('builder')[0]?.context).toEqual([
      { step: 'plan', agent: 'planner', round: 1, output: edited },
    ]);
    expect(again.calls('worker').map((r) => r.input?.item)).toEqual(['z']);
    // kind is no longer "x": the route skips the sub-pipeline and the review, straight to close.
    expect(again.submitted).toEqual([]);
  });

  it("a fork that edits a foreach's list reuses an item's runs only where its item is the original's", async () => {
    const edited = JSON.stringify({ parts: ['a', 'z', 'c', 'd'], kind: 'x' });
    const { input } = await restarted('choose', { plan: edited });
    const again = await run(everyKind, everyKindScript, { ...everyKindOptions, input });
    expect(again.output.status).toBe('completed');
    // Item 1 is z now, not b: its run is not the original's b run; item 3 is new. Items 0 and 2 are as they were.
    const roundOne = again.calls('worker').filter((r) => r.round === 1);
    expect(roundOne.map((r) => r.input?.item).sort()).toEqual(['d', 'z']);
    const parts = ofKind(again.events, 'step.completed')
      .map((e) => e.data as { step: string; round: number; output: string; reused?: boolean })
      .filter((d) => d.step === 'part' && d.round === 1);
    expect(parts.map((d) => [d.output, d.reused === true]).sort()).toEqual([
      ['part a', true],
      ['part c', true],
      ['part d', false],
      ['part z', false],
    ]);
  });

  it('resumes from any checkpoint of the new task and still reuses exactly', async () => {
    const { input } = await restarted('close');
    const checkpoints: unknown[] = [];
    const first = await run(everyKind, everyKindScript, {
      ...everyKindOptions,
      input,
      onCheckpoint: (c) => checkpoints.push(c),
    });
    expect(checkpoints.length).toBeGreaterThan(5);
    for (const snapshot of checkpoints) {
      const resumed = await run(everyKind, everyKindScript, { ...everyKindOptions, input, snapshot });
      expect(resumed.output.output).toBe(first.output.output);
      expect(resumed.requests.every((r) => r.request.agent === 'closer')).toBe(true);
      expect(resumed.asked).toEqual([]);
      expect(resumed.submitted).toEqual([]);
    }
  });

  it("gives each foreach item only its own runs' reuse, so no item's checkpoint holds every item's", async () => {
    const { input } = await restarted('close');
    const keys = Object.keys(input.reuse ?? {});
    expect(keys).toEqual(expect.arrayContaining(['part.1.i0', 'part.1.i1', 'part.1.i2', 'plan.1']));
    expect(Object.keys(reuseOfItem(input, 1).reuse ?? {}).sort()).toEqual(['part.1.i1', 'part.2.i1']);
    expect(reuseOfItem({ ...task }, 1)).toEqual(task);
  });
});
