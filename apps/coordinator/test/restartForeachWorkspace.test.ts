import { reusedWorkspace, reusePlan } from '@troupe/client';
import type { TroupeEvent, WorkspaceChanges } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import type { WorkflowEmitted, WorkflowInput } from '../src/workflow/workflowTypes.ts';
import { pipelineOf, type Reply, run, type Script, task, text } from './support/runFlow.ts';

const file = (digit: string) => ({ bytes: 2, sha256: digit.repeat(64) });
const withFiles = (reply: Reply, files: Record<string, string>): Reply => {
  const workspace: WorkspaceChanges = {
    files: Object.fromEntries(Object.entries(files).map(([path, digit]) => [path, file(digit)])),
    removed: [],
  };
  return { ...reply, workspace } as Reply;
};

/** Two items at once, each through gen (which writes `<item>.gen`), build and check. */
const config = pipelineOf(
  ['planner', 'generator', 'builder', 'checker'],
  [
    { id: 'plan', kind: 'agent', agent: 'planner' },
    {
      id: 'each',
      kind: 'foreach',
      items: 'steps.plan.output.parts',
      maxItems: 5,
      concurrency: 2,
      do: [
        { id: 'gen', kind: 'agent', agent: 'generator' },
        { id: 'build', kind: 'agent', agent: 'builder' },
        { id: 'check', kind: 'agent', agent: 'checker' },
      ],
    },
  ],
  { workspace: { handOff: true } },
);
const stored = (events: WorkflowEmitted[], taskId: string): TroupeEvent[] =>
  events.map(
    (e, i): TroupeEvent =>
      ({ id: `e${i}`, ts: '', pipeline: 'demo', taskId, ...e }) as unknown as TroupeEvent,
  );
const itemOf = (request: { input?: Record<string, unknown> | undefined }) => request.input?.item as string;

describe('a restart from a step inside a foreach whose items run side by side', () => {
  it("gives each item the files its reused runs handed on, though the step's first record is another item's", async () => {
    // Item b's gen ends only once a's build is at work, and a's build once b's is: so b's gen completes while a's
    // build runs, before either item's check starts, and no check's record holds both items' files.
    let genB = () => {};
    let buildA = () => {};
    const genBWaits = new Promise<void>((resolve) => {
      genB = resolve;
    });
    const buildAWaits = new Promise<void>((resolve) => {
      buildA = resolve;
    });
    const script: Script = {
      planner: () => withFiles(text(JSON.stringify({ parts: ['a', 'b'] })), { 'plan.md': '1' }),
      generator: async (request) => {
        const item = itemOf(request);
        if (item === 'b') await genBWaits;
        return withFiles(text(`gen ${item}`), { [`${item}.gen`]: item });
      },
      builder: async (request) => {
        if (itemOf(request) === 'a') {
          genB();
          await buildAWaits;
        } else buildA();
        return text(`built ${itemOf(request)}`);
      },
      checker: () =>
        ({ ...text('no'), ok: false, error: { code: 'failed', message: 'no' } }) as unknown as Reply,
    };
    const original = await run(config, script);
    const events = stored(original.events, task.taskId);
    const origin = { taskId: task.taskId, step: 'check' };
    const plan = reusePlan(events, origin);
    if (!plan.ok) throw new Error(plan.message);
    // Both items' gen runs are reused.
    expect(Object.keys(plan.steps)).toEqual(expect.arrayContaining(['gen.1.i0', 'gen.1.i1']));
    const carried = reusedWorkspace(events, origin);
    const input: WorkflowInput = {
      ...task,
      taskId: 'task-2',
      origin: { ...origin, kind: 'restart' },
      reuse: plan.steps,
      ...(carried.manifest ? { workspace: carried.manifest } : {}),
    };
    const again = await run(
      config,
      { ...script, builder: (r) => text(`built ${itemOf(r)}`), checker: () => text('ok') },
      { input },
    );
    expect(again.output.status).toBe('completed');
    expect(again.calls('generator')).toEqual([]);
    // Each item's check has the file its reused gen wrote, from the original's object.
    const checks = Object.fromEntries(again.calls('checker').map((r) => [itemOf(r), r.workspace ?? {}]));
    expect(checks.a?.['a.gen']).toEqual({ ...file('a'), task: task.taskId });
    expect(checks.b?.['b.gen']).toEqual({ ...file('b'), task: task.taskId });
  });
});
