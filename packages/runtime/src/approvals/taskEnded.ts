import type { HumanRequest, TaskEnding, TroupeEvent } from '@troupe/protocol';
import type { KeyValue } from '../durable/kvStore.ts';
import type { StepJournal } from '../durable/stepJournal.ts';
import { rewritePending } from './pendingRecord.ts';

/**
 * Why a step was stopped when its task ended (completed, failed or was cancelled): given as the abort reason, so
 * what the step was waiting on (a person's decision, a tool) closes with the task's ending, not as expired.
 */
export class TaskEndedError extends Error {
  override readonly name = 'TaskEndedError';
  readonly ending: TaskEnding;

  constructor(taskId: string, ending: TaskEnding) {
    super(`task ${taskId} has ended: ${describeEnding(ending)}`);
    this.ending = ending;
  }
}

/** How a task ended, as its final event (`task.completed`, `task.failed`, `task.cancelled`) says; else undefined. */
export function endingOf(event: TroupeEvent): TaskEnding | undefined {
  if (event.kind === 'task.failed') return { status: 'failed', reason: event.data.reason };
  if (event.kind === 'task.cancelled') return { status: 'cancelled' };
  if (event.kind === 'task.completed') return { status: 'completed' };
  return undefined;
}

/** `failed (budget_exceeded)`, `completed`, `cancelled`. */
export function describeEnding(ending: TaskEnding): string {
  return ending.reason === undefined ? ending.status : `${ending.status} (${ending.reason})`;
}

/** The record of a request closed because its task ended while it was pending. */
export function closedByEnding(record: HumanRequest, ending: TaskEnding, now: number): HumanRequest {
  // Closed, nothing is left to run out or to hold: a record keeping `held` would say its task is paused for ever.
  const { held: _held, ...unheld } = record;
  return { ...unheld, status: 'closed', taskEnded: ending, decidedAt: new Date(now).toISOString() };
}

/**
 * Closes every approval and question of a task that is still pending, once the task has ended: nothing will wait
 * for them again, and `troupe approve` on one then says how the task ended. The task's step journal says which
 * requests its steps asked; `store` holds the task's pipeline's requests. Returns how many were closed; a record decided
 * meanwhile is left as it is.
 */
export async function closeTaskRequests(
  taskId: string,
  ending: TaskEnding,
  deps: { journal: StepJournal; store: KeyValue<HumanRequest>; now: () => number },
): Promise<number> {
  let closed = 0;
  for (const id of await deps.journal.humanRequestsOf(taskId)) {
    if (await rewritePending(deps.store, id, (record) => closedByEnding(record, ending, deps.now())))
      closed += 1;
  }
  return closed;
}
