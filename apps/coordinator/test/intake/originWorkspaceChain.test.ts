import { emptyUsage, type TaskSubmission, type WorkspaceManifest } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { PipelineConfig } from '../../src/config/pipelineSchema.ts';
import { claim } from '../../src/intake/claim.ts';
import type { WorkflowInput } from '../../src/workflow/workflowTypes.ts';
import { config, intakeServices, triagedTask } from './taskServices.ts';

const handOff = PipelineConfig.parse({ ...config, workspace: { handOff: true } });
const file = (digit: string) => ({ bytes: 2, sha256: digit.repeat(64) });
type Setup = ReturnType<typeof intakeServices>;

async function claimed(setup: Setup, submission: TaskSubmission): Promise<WorkflowInput> {
  const result = await claim(setup.services, triagedTask(submission));
  if (result.next !== 'run') throw new Error(`claimed as ${result.next}`);
  return result.claimed.input;
}

/**
 * What task `taskId`'s workflow publishes as it runs write, read and check, each starting with the manifest given
 * (as step.started records it), reused up to `reusedBefore`, and check failing; then its record says failed.
 */
async function ran(
  setup: Setup,
  input: WorkflowInput,
  manifests: Record<'write' | 'read' | 'check', WorkspaceManifest | undefined>,
) {
  const { services, bus, store } = setup;
  const { taskId } = input;
  const scope = { pipeline: 'unit', taskId, traceparent: input.traceparent };
  for (const step of ['write', 'read', 'check'] as const) {
    const ref = { step, agent: 'planner', round: 1, stepId: `${taskId}.${step}.1` };
    const workspace = manifests[step];
    await bus.publishEvent(
      services.events.make('step.started', scope, { ...ref, ...(workspace ? { workspace } : {}) }),
    );
    const reused = input.reuse?.[`${step}.1`] !== undefined;
    await bus.publishEvent(
      services.events.make('step.completed', scope, {
        ...ref,
        ok: step !== 'check',
        output: `${step} done`,
        usage: emptyUsage(),
        turns: 1,
        durationMs: 1,
        ...(reused ? { reused: true } : {}),
      }),
    );
  }
  await bus.settled();
  const entry = await store.get(taskId);
  if (!entry) throw new Error('no record');
  await store.update(taskId, { ...entry.value, status: 'failed' }, entry.revision);
}

describe("a restart of a restart's workspace", () => {
  it("from a step its origin only reused starts with the files that step's own run had, not its origin's later ones", async () => {
    const setup = intakeServices({ config: handOff });
    // task-1: write hands on notes.md and scratch.txt; read adds read.log and removes scratch.txt; check fails.
    const first = await claimed(setup, { id: 'task-1', goal: 'g' });
    await ran(setup, first, {
      write: undefined,
      read: { 'notes.md': file('a'), 'scratch.txt': file('b') },
      check: { 'notes.md': file('a'), 'read.log': file('c') },
    });
    // task-2 restarts task-1 from check: write and read are reused, every step starts with check's files.
    const second = await claimed(setup, {
      id: 'task-2',
      goal: 'g',
      origin: { taskId: 'task-1', kind: 'restart', step: 'check' },
    });
    expect(second.workspace).toEqual({
      'notes.md': { ...file('a'), task: 'task-1' },
      'read.log': { ...file('c'), task: 'task-1' },
    });
    await ran(setup, second, { write: second.workspace, read: second.workspace, check: second.workspace });
    // task-3 restarts task-2 from read, which task-2 reused: read runs again, with the files it had in task-1.
    const third = await claimed(setup, {
      id: 'task-3',
      goal: 'g',
      origin: { taskId: 'task-2', kind: 'restart', step: 'read' },
    });
    expect(Object.keys(third.reuse ?? {})).toEqual(['write.1']);
    expect(third.workspace).toEqual({
      'notes.md': { ...file('a'), task: 'task-1' },
      'scratch.txt': { ...file('b'), task: 'task-1' },
    });
    // From the step task-2 restarted at, task-2's own record stands.
    const fourth = await claimed(setup, {
      id: 'task-4',
      goal: 'g',
      origin: { taskId: 'task-2', kind: 'restart', step: 'check' },
    });
    expect(fourth.workspace).toEqual(second.workspace);
    // From its first step: nothing, as task-1's write started with nothing.
    const fifth = await claimed(setup, {
      id: 'task-5',
      goal: 'g',
      origin: { taskId: 'task-2', kind: 'restart', step: 'write' },
    });
    expect(fifth.workspace).toBeUndefined();
  });

  it("keeps its origin's record where a step before it ran there (its files are that task's own)", async () => {
    const setup = intakeServices({ config: handOff });
    const first = await claimed(setup, { id: 'task-1', goal: 'g' });
    await ran(setup, first, {
      write: undefined,
      read: { 'notes.md': file('a') },
      check: { 'notes.md': file('a'), 'read.log': file('c') },
    });
    const second = await claimed(setup, {
      id: 'task-2',
      goal: 'g',
      origin: { taskId: 'task-1', kind: 'restart', step: 'check' },
    });
    // As a fork's step run again would: write runs in task-2 and hands on a file of task-2's own.
    const { 'write.1': _ran, ...reuse } = second.reuse ?? {};
    const own = { ...second.workspace, 'notes.md': file('d') };
    await ran(setup, { ...second, reuse }, { write: second.workspace, read: own, check: own });
    const third = await claimed(setup, {
      id: 'task-3',
      goal: 'g',
      origin: { taskId: 'task-2', kind: 'restart', step: 'read' },
    });
    expect(third.workspace?.['notes.md']).toEqual({ ...file('d'), task: 'task-2' });
  });
});
