import { errorMessage } from '@troupe/protocol';
import { createActor, type Snapshot } from 'xstate';
import { allSteps } from '../config/flowLayout.ts';
import type { PipelineConfig } from '../config/pipelineSchema.ts';
import { canonicalJson } from '../config/pipelineVersion.ts';
import type { WorkflowMachine } from './compileFlow.ts';
import { unfitItem } from './steps/foreachItem.ts';
import type { WorkflowInput } from './workflowTypes.ts';

/** A version of the pipeline as a migration compares it: its config, and its flow compiled. */
export interface MigrationTarget {
  config: PipelineConfig;
  machine: WorkflowMachine;
}

/**
 * Why a task cannot move from version `from` to `to` as it stands, or undefined when it can. It can when every step
 * it has done is in `to` unchanged (so what later steps read of them means what it meant), and its checkpoint
 * restores in `to`'s flow (every step it is in, and every foreach item it has at work, exists there).
 */
export function migrationProblem(
  snapshot: unknown,
  input: WorkflowInput,
  from: PipelineConfig,
  to: MigrationTarget,
): string | undefined {
  const done = doneSteps(snapshot);
  const before = new Map(allSteps(from.flow).map((step) => [step.id, step]));
  const after = new Map(allSteps(to.config.flow).map((step) => [step.id, step]));
  for (const id of done) {
    const target = after.get(id);
    if (target === undefined) return `step ${id}, which the task has done, is not in the version asked for`;
    const source = before.get(id);
    if (source !== undefined && canonicalJson(source) !== canonicalJson(target)) {
      return `step ${id}, which the task has done, is defined otherwise in the version asked for`;
    }
  }
  const restored = createActor(to.machine, { input, snapshot: snapshot as Snapshot<unknown> }).getSnapshot();
  if (restored.status === 'error') {
    return `its checkpoint does not fit the version asked for (${errorMessage(restored.error)})`;
  }
  const item = unfitItem(restored);
  if (item) return `a foreach item at work does not fit the version asked for (${errorMessage(item.error)})`;
  return undefined;
}

/** The steps a checkpoint says the task has done: those with an output now, or a failure the flow went on from. */
function doneSteps(snapshot: unknown): string[] {
  const context = (snapshot as { context?: { latest?: object; errors?: object } } | undefined)?.context;
  return [...new Set([...Object.keys(context?.latest ?? {}), ...Object.keys(context?.errors ?? {})])].sort();
}
