import { type ReusedSteps, reusePlan } from '@troupe/client';
import type { TaskOrigin } from '@troupe/protocol';
import type { TaskServices } from '../task/taskServices.ts';

/** What a restart or fork starts from: its origin's version (none: the newest), and the step outputs it reuses. */
export type OriginClaim =
  | { ok: true; version: string | undefined; reuse: ReusedSteps }
  | { ok: false; problem: string };

/**
 * Reads, as a restart or fork is first claimed, what it takes from its origin: the ended task's record (for the
 * version it ran on, which the new task runs on too, so the reused outputs meet the flow that made them) and its
 * events (for the outputs of the steps that completed before the origin step first started, edited as a fork's `set`
 * says). Read once: the outputs go into the task's input, and so into every checkpoint of it; an ended task's events
 * do not change, so a claim before the first checkpoint reads the same again.
 */
export async function claimOrigin(
  { store, taskEvents }: Pick<TaskServices, 'store' | 'taskEvents'>,
  origin: TaskOrigin,
): Promise<OriginClaim> {
  const { taskId, kind } = origin;
  const problem = (why: string): OriginClaim => ({
    ok: false,
    problem: `cannot ${kind} task ${taskId}: ${why}`,
  });
  // A store or stream that cannot be read now throws (the delivery comes again): only what was read is an answer.
  const record = (await store.get(taskId))?.value;
  if (!record) return problem('no such task is known');
  if (record.status === 'running') return problem('it is still running');
  const plan = reusePlan(await taskEvents(taskId, record.pipeline), origin);
  if (!plan.ok) return problem(plan.message);
  // Undefined for a task asked to run on the newest version, as for a new task.
  return { ok: true, version: origin.newest ? undefined : record.version, reuse: plan.steps };
}
