import { reusePlan } from '@troupe/client';
import type { TroupeEvent } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import type { WorkflowEmitted, WorkflowInput } from '../src/workflow/workflowTypes.ts';
import { everyKind, everyKindOptions, everyKindScript } from './support/everyKind.ts';
import { failedReply, ofKind, run, type Script, task, text, verdict } from './support/runFlow.ts';

/**
 * Restarts and forks that start from a step inside a parallel branch, from a `human` step and from a `pipeline` step,
 * and restarts of tasks that failed (retries exhausted, in a branch, in a foreach item). The review approves at once,
 * so each task has one round and every count below is of that round.
 */
const oneRound: Script = { ...everyKindScript, reviewer: () => verdict('approve', 'good') };

/** The original fails in its parallel step's `right` branch. */
const failsRight: Script = { ...oneRound, righty: () => failedReply('right broke') };
/** The original fails in its foreach step's item `b`. */
const failsItemB: Script = {
  ...oneRound,
  worker: (request) =>
    request.input?.item === 'b' ? failedReply('b broke') : text(`part ${String(request.input?.item)}`),
};

/** The original task's run, with its events as EVENTS would hold them. */
async function original(script: Script = oneRound) {
  const ran = await run(everyKind, script, everyKindOptions);
  const events = ran.events.map(
    (e: WorkflowEmitted, i): TroupeEvent =>
      ({ id: `e${i}`, ts: '', pipeline: 'demo', taskId: task.taskId, ...e }) as unknown as TroupeEvent,
  );
  return { ...ran, events };
}

/** The new task of the restart (or, with `set`, the fork) of `origin` from `step`, as the claim would make it. */
function remade(
  origin: { events: TroupeEvent[] },
  step: string,
  set?: Record<string, string>,
): WorkflowInput {
  const plan = reusePlan(origin.events, { taskId: task.taskId, step, ...(set ? { set } : {}) });
  if (!plan.ok) throw new Error(plan.message);
  return {
    ...task,
    taskId: 'task-2',
    origin: { taskId: task.taskId, kind: set ? 'fork' : 'restart', step },
    reuse: plan.steps,
  };
}

/** Runs the restart (or, with `set`, the fork) of `origin` from `step`. */
async function from(
  origin: { events: TroupeEvent[] },
  step: string,
  { set, script = oneRound }: { set?: Record<string, string>; script?: Script } = {},
) {
  const input = remade(origin, step, set);
  const again = await run(everyKind, script, { ...everyKindOptions, input });
  const completed = ofKind(again.events, 'step.completed').map(
    (e) => e.data as { step: string; stepId: string; reused?: boolean },
  );
  return {
    ...again,
    reused: completed.filter((c) => c.reused).map((c) => c.step),
    ran: completed.filter((c) => !c.reused).map((c) => c.step),
    /** How many model calls each agent was sent (a reused step sends none). */
    sent: (agent: string) => again.calls(agent).length,
  };
}

/** What the agents after the parallel step are sent when none of them is reused. */
function expectTheRestRan(again: Awaited<ReturnType<typeof from>>) {
  expect(again.output.status).toBe('completed');
  expect(again.sent('worker')).toBe(3);
  expect(again.submitted.map((s) => s.task.parent.taskId)).toEqual(['task-2']);
  expect(again.sent('router')).toBe(1);
  expect(again.sent('reviewer')).toBe(1);
  expect(again.sent('closer')).toBe(1);
}

describe('a restart or fork from a step inside a parallel branch', () => {
  it('from the first branch step: the steps before the parallel step are reused, every branch runs', async () => {
    const again = await from(await original(), 'left');
    expect(again.reused.sort()).toEqual(['build', 'plan']);
    expect(again.sent('planner')).toBe(0);
    expect(again.sent('builder')).toBe(0);
    expect(again.sent('lefty')).toBe(1);
    expect(again.sent('righty')).toBe(1);
    expect(again.asked.map((a) => a.stepId)).toEqual(['task-2.ask.1']);
    expectTheRestRan(again);
  });

  it('from a later step of a branch: what ended before it started there is reused, the person not asked again', async () => {
    const origin = await original();
    // In the original, `left` ended after `right` started: it runs again; `ask` had been answered.
    const order = origin.events.flatMap((e) =>
      e.kind === 'step.started' || e.kind === 'step.completed' ? [`${e.kind}:${e.data.step}`] : [],
    );
    expect(order.indexOf('step.completed:ask')).toBeLessThan(order.indexOf('step.started:right'));
    expect(order.indexOf('step.completed:left')).toBeGreaterThan(order.indexOf('step.started:right'));
    const again = await from(origin, 'right');
    expect(again.reused.sort()).toEqual(['ask', 'build', 'plan']);
    expect(again.asked).toEqual([]);
    expect(again.sent('planner') + again.sent('builder')).toBe(0);
    expect(again.sent('righty')).toBe(1);
    expect(again.sent('lefty')).toBe(1);
    // The branch step is sent the reused answer, as the original's was.
    expect(again.calls('righty')[0]?.context.find((c) => c.step === 'ask')?.output).toBe(
      'yes to task-1.ask.1',
    );
    expectTheRestRan(again);
  });

  it('a fork at a branch step that edits an earlier output: the branches see the edit, and the person is asked again', async () => {
    const again = await from(await original(), 'right', { set: { build: 'built otherwise' } });
    // `ask` ended before `right` started, but its answer came after the edited build: it is asked again.
    expect(again.reused.sort()).toEqual(['build', 'plan']);
    expect(again.asked.map((a) => a.stepId)).toEqual(['task-2.ask.1']);
    expect(again.sent('builder')).toBe(0);
    for (const agent of ['lefty', 'righty', 'closer']) {
      expect(again.calls(agent)[0]?.context.find((c) => c.step === 'build')?.output).toBe('built otherwise');
    }
    expectTheRestRan(again);
  });
});

describe('a restart or fork from a human step', () => {
  it('asks the person again, once, and reuses the steps before it', async () => {
    const again = await from(await original(), 'ask');
    expect(again.reused.sort()).toEqual(['build', 'plan']);
    expect(again.asked.map((a) => a.stepId)).toEqual(['task-2.ask.1']);
    expect(again.sent('planner') + again.sent('builder')).toBe(0);
    // The step after it in its branch is sent the new answer.
    expect(again.calls('righty')[0]?.context.find((c) => c.step === 'ask')?.output).toBe(
      'yes to task-2.ask.1',
    );
    expectTheRestRan(again);
  });

  it('a fork at the human step asks the person about the edited output', async () => {
    const again = await from(await original(), 'ask', {
      set: { plan: JSON.stringify({ parts: ['q'], kind: 'x' }) },
    });
    expect(again.asked.map((a) => a.stepId)).toEqual(['task-2.ask.1']);
    expect(again.sent('planner')).toBe(0);
    // build is reused as the original made it (from the original plan); the foreach runs on the edited list.
    expect(again.sent('builder')).toBe(0);
    expect(again.calls('worker').map((r) => r.input?.item)).toEqual(['q']);
    expect(again.output.status).toBe('completed');
  });
});

describe('a restart or fork from a pipeline step', () => {
  it('submits one new sub-task and reuses every step before it: no agent, no person', async () => {
    const origin = await original();
    const again = await from(origin, 'sub');
    expect(again.reused.sort()).toEqual(['ask', 'build', 'left', 'part', 'part', 'part', 'plan', 'right']);
    for (const agent of ['planner', 'builder', 'lefty', 'righty', 'worker'])
      expect(again.sent(agent)).toBe(0);
    expect(again.asked).toEqual([]);
    // A sub-task of its own, not the original's.
    expect(origin.submitted).toHaveLength(1);
    expect(again.submitted).toHaveLength(1);
    expect(again.submitted[0]?.task.parent.taskId).toBe('task-2');
    expect(again.submitted[0]?.task.id).not.toBe(origin.submitted[0]?.task.id);
    expect(again.ran).toEqual(['sub', 'choose', 'check', 'close']);
    expect(again.sent('router') + again.sent('reviewer') + again.sent('closer')).toBe(3);
    expect(again.calls('closer')[0]?.context.find((c) => c.step === 'sub')?.output).toBe(
      `outline for ${again.submitted[0]?.task.id}`,
    );
  });

  it('resumed from any checkpoint of the new task, submits the same sub-task, if any, and runs nothing before it', async () => {
    const input = remade(await original(), 'sub');
    const checkpoints: unknown[] = [];
    const first = await run(everyKind, oneRound, {
      ...everyKindOptions,
      input,
      onCheckpoint: (c) => checkpoints.push(c),
    });
    const subTask = first.submitted[0]?.task.id;
    expect(checkpoints.length).toBeGreaterThan(5);
    for (const snapshot of checkpoints) {
      const resumed = await run(everyKind, oneRound, { ...everyKindOptions, input, snapshot });
      expect(resumed.output.output).toBe(first.output.output);
      expect(resumed.submitted.map((s) => s.task.id)).toEqual(resumed.submitted.length ? [subTask] : []);
      expect(resumed.requests.every((r) => ['router', 'reviewer', 'closer'].includes(r.request.agent))).toBe(
        true,
      );
      expect(resumed.asked).toEqual([]);
    }
  });

  it('a fork at the pipeline step: the sub-task and the steps after it see the edit', async () => {
    const again = await from(await original(), 'sub', { set: { right: 'right, edited' } });
    for (const agent of ['planner', 'builder', 'lefty', 'righty', 'worker'])
      expect(again.sent(agent)).toBe(0);
    expect(again.asked).toEqual([]);
    expect(again.submitted).toHaveLength(1);
    // The sub-task's input carries the parallel step's outputs, the edited branch among them; so does the closer's.
    const seen = again.submitted[0]?.task.input as { context: { fan: { right: string } } };
    expect(seen.context.fan.right).toBe('right, edited');
    expect(again.calls('closer')[0]?.context.find((c) => c.step === 'fan')?.output).toContain(
      'right, edited',
    );
    expect(again.output.status).toBe('completed');
  });
});

describe('a restart of a failed task', () => {
  it('that used up its retries runs the failed step afresh, with its retries, and none before it', async () => {
    const broken: Script = { ...oneRound, builder: () => failedReply('still broken') };
    const origin = await original(broken);
    expect(origin.output.status).toBe('failed');
    expect(origin.calls('builder')).toHaveLength(2);
    // Fixed, but its first try fails once more: the new task retries it, as the original's retries do not count.
    const fixed: Script = {
      ...oneRound,
      builder: (request) => (request.stepId === 'task-2.build.1' ? failedReply('once more') : text('built')),
    };
    const again = await from(origin, 'build', { script: fixed });
    expect(again.output.status).toBe('completed');
    expect(again.reused).toEqual(['plan']);
    expect(again.sent('planner')).toBe(0);
    expect(again.calls('builder').map((r) => r.stepId)).toEqual(['task-2.build.1', 'task-2.build.1-r1']);
    expect(again.asked.map((a) => a.stepId)).toEqual(['task-2.ask.1']);
    expectTheRestRan(again);
  });

  it('that failed in a parallel branch runs from the failed branch step, reusing the answer given before it', async () => {
    const origin = await original(failsRight);
    expect(origin.output.status).toBe('failed');
    expect(origin.submitted).toEqual([]);
    const again = await from(origin, 'right');
    expect(again.output.status).toBe('completed');
    expect(again.reused.sort()).toEqual(['ask', 'build', 'plan']);
    expect(again.sent('planner') + again.sent('builder')).toBe(0);
    expect(again.asked).toEqual([]);
    expect(again.sent('righty')).toBe(1);
    expectTheRestRan(again);
  });

  it('that failed in a foreach item runs every item again, and nothing before the foreach', async () => {
    const origin = await original(failsItemB);
    expect(origin.output.status).toBe('failed');
    const again = await from(origin, 'part');
    expect(again.output.status).toBe('completed');
    expect(again.reused.sort()).toEqual(['ask', 'build', 'left', 'plan', 'right']);
    for (const agent of ['planner', 'builder', 'lefty', 'righty']) expect(again.sent(agent)).toBe(0);
    expect(again.asked).toEqual([]);
    expect(
      again
        .calls('worker')
        .map((r) => r.input?.item)
        .sort(),
    ).toEqual(['a', 'b', 'c']);
    expectTheRestRan(again);
  });
});

describe('a restart from a branch, human or foreach step, resumed from any of its checkpoints', () => {
  it.each([
    ['a branch step', oneRound, 'left'],
    ['a later branch step', oneRound, 'right'],
    ['a human step', oneRound, 'ask'],
    ['the branch step that failed', failsRight, 'right'],
    ['the foreach item step that failed', failsItemB, 'part'],
  ])(
    'from %s: runs, asks and submits nothing the uninterrupted run did not, and ends the same',
    async (_, script, step) => {
      const input = remade(await original(script), step);
      const checkpoints: unknown[] = [];
      const first = await run(everyKind, oneRound, {
        ...everyKindOptions,
        input,
        onCheckpoint: (c) => checkpoints.push(c),
      });
      expect(first.output.status).toBe('completed');
      const sent = new Set(first.requests.map((r) => r.request.stepId));
      const asked = new Set(first.asked.map((a) => a.stepId));
      const submitted = new Set(first.submitted.map((s) => s.task.id));
      expect(checkpoints.length).toBeGreaterThan(5);
      for (const snapshot of checkpoints) {
        const resumed = await run(everyKind, oneRound, { ...everyKindOptions, input, snapshot });
        expect(resumed.output.output).toBe(first.output.output);
        expect(resumed.requests.filter((r) => !sent.has(r.request.stepId))).toEqual([]);
        expect(resumed.asked.filter((a) => !asked.has(a.stepId))).toEqual([]);
        expect(resumed.submitted.filter((s) => !submitted.has(s.task.id))).toEqual([]);
      }
    },
  );
});
