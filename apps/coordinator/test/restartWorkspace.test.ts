import { reusedWorkspace, reusePlan, workspaceOnVersion } from '@troupe/client';
import type { TroupeEvent, WorkspaceChanges } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import type { WorkflowEmitted, WorkflowInput } from '../src/workflow/workflowTypes.ts';
import { ofKind, pipelineOf, type Reply, run, type Script, task, text } from './support/runFlow.ts';

const file = (digit: string) => ({ bytes: 2, sha256: digit.repeat(64) });
/** A reply that hands on these files (path → the digit its digest repeats). */
const withFiles = (reply: Reply, files: Record<string, string>, removed: string[] = []): Reply => {
  const workspace: WorkspaceChanges = {
    files: Object.fromEntries(Object.entries(files).map(([path, digit]) => [path, file(digit)])),
    removed,
  };
  return { ...reply, workspace } as Reply;
};

const config = pipelineOf(
  ['writer', 'reader', 'checker'],
  [
    { id: 'write', kind: 'agent', agent: 'writer' },
    { id: 'read', kind: 'agent', agent: 'reader' },
    { id: 'check', kind: 'agent', agent: 'checker' },
  ],
);
const script: Script = {
  writer: () => withFiles(text('wrote notes'), { 'notes.md': 'a', 'scratch.txt': 'b' }),
  reader: () => withFiles(text('read notes'), { 'read.log': 'c' }, ['scratch.txt']),
  checker: () => text('checked'),
};

/** A run's events as EVENTS would hold them for task `taskId`. */
const stored = (events: WorkflowEmitted[], taskId: string): TroupeEvent[] =>
  events.map(
    (e, i): TroupeEvent =>
      ({ id: `e${i}`, ts: '', pipeline: 'demo', taskId, ...e }) as unknown as TroupeEvent,
  );

/** A restart of `from` as its claim makes it: the reused outputs and the carried workspace from `events`. */
function restartOf(events: TroupeEvent[], originTaskId: string, from: string, taskId: string): WorkflowInput {
  const origin = { taskId: originTaskId, step: from };
  const plan = reusePlan(events, origin);
  if (!plan.ok) throw new Error(plan.message);
  const carried = workspaceOnVersion(reusedWorkspace(events, origin), origin, true);
  return {
    ...task,
    taskId,
    origin: { ...origin, kind: 'restart' },
    reuse: plan.steps,
    ...(carried.manifest ? { workspace: carried.manifest } : {}),
  };
}

describe("a restart's or fork's workspace", () => {
  it('records the manifest each step starts with in its step.started', async () => {
    const { events } = await run(config, script);
    expect(ofKind(events, 'step.started').map((e) => [e.data.step, e.data.workspace])).toEqual([
      // Nothing handed on yet: no manifest.
      ['write', undefined],
      ['read', { 'notes.md': file('a'), 'scratch.txt': file('b') }],
      ['check', { 'notes.md': file('a'), 'read.log': file('c') }],
    ]);
  });

  it("starts from the origin's files as the step first started there, named by the origin's task, and runs none of the earlier steps", async () => {
    const original = await run(config, script);
    const input = restartOf(stored(original.events, task.taskId), task.taskId, 'read', 'task-2');
    const again = await run(config, script, { input });
    expect(again.output.status).toBe('completed');
    expect(again.calls('writer')).toEqual([]);
    // The reader is sent the writer's files as the original had them when read first started, read from its objects.
    const carried = {
      'notes.md': { ...file('a'), task: task.taskId },
      'scratch.txt': { ...file('b'), task: task.taskId },
    };
    expect(again.calls('reader')[0]?.workspace).toEqual(carried);
    // What the reader changes applies on top: its own file new, the removed one gone, the carried one still the origin's.
    expect(again.calls('checker')[0]?.workspace).toEqual({
      'notes.md': { ...file('a'), task: task.taskId },
      'read.log': file('c'),
    });
    // The checkpoint holds the carried files once: in the manifest, not in the task's input.
    expect(ofKind(again.events, 'step.started').find((e) => e.data.step === 'read')?.data.workspace).toEqual(
      carried,
    );
  });

  it('a restart of a restart reads each file from the task that stored it', async () => {
    const first = await run(config, script);
    const second = await run(config, script, {
      input: restartOf(stored(first.events, task.taskId), task.taskId, 'read', 'task-2'),
    });
    const third = restartOf(stored(second.events, 'task-2'), 'task-2', 'check', 'task-3');
    expect(third.workspace).toEqual({
      'notes.md': { ...file('a'), task: task.taskId },
      'read.log': { ...file('c'), task: 'task-2' },
    });
  });

  it('carries nothing, saying why, where the origin handed no files on or the new version does not', async () => {
    const original = await run(config, { ...script, writer: () => text('wrote nothing') });
    const bare = stored(
      original.events.map((e) =>
        e.kind === 'step.started' ? { ...e, data: { ...e.data, workspace: undefined } } : e,
      ),
      task.taskId,
    );
    const origin = { taskId: task.taskId, step: 'read' };
    const none = reusedWorkspace(bare, origin);
    expect(none).toMatchObject({ files: 0, bytes: 0 });
    expect(none.manifest).toBeUndefined();
    expect(none.note).toContain('its events record none handed on before step read started');

    const handed = stored((await run(config, script)).events, task.taskId);
    expect(reusedWorkspace(handed, origin)).toMatchObject({ files: 2, bytes: 4 });
    const off = workspaceOnVersion(reusedWorkspace(handed, origin), origin, false);
    expect(off.manifest).toBeUndefined();
    expect(off.note).toContain('does not hand files between steps (workspace.handOff)');
    // Files were handed on, just none before the first step: nothing to carry, nothing to explain.
    expect(reusedWorkspace(handed, { taskId: task.taskId, step: 'write' })).toEqual({ files: 0, bytes: 0 });
  });
});
