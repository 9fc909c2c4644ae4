import { type ReusedSteps, readTaskEvents, reusePlan } from '@troupe/client';
import { errorMessage, type TaskOrigin } from '@troupe/protocol';
import type { Bus, JetStreamBus } from '@troupe/runtime';
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
  { bus, store }: Pick<TaskServices, 'bus' | 'store'>,
  origin: TaskOrigin,
): Promise<OriginClaim> {
  const { taskId, kind } = origin;
  const problem = (why: string): OriginClaim => ({
    ok: false,
    problem: `cannot ${kind} task ${taskId}: ${why}`,
  });
  const record = (await store.get(taskId).catch(() => undefined))?.value;
  if (!record) return problem('no such task is known');
  if (record.status === 'running') return problem('it is still running');
  const events = jetStream(bus);
  if (!events) return problem("this coordinator's connection cannot read the EVENTS stream");
  let plan: ReturnType<typeof reusePlan>;
  try {
    plan = reusePlan(await readTaskEvents(events, taskId, record.pipeline), origin);
  } catch (error) {
    return problem(`its events cannot be read (${errorMessage(error)})`);
  }
  if (!plan.ok) return problem(plan.message);
  // Undefined for a task asked to run on the newest version, as for a new task.
  return { ok: true, version: origin.newest ? undefined : record.version, reuse: plan.steps };
}

/** The bus as a JetStream connection, which a coordinator's always is (a unit test's in-memory bus is not). */
function jetStream(bus: Bus): JetStreamBus | undefined {
  return 'servers' in bus ? (bus as JetStreamBus) : undefined;
}
