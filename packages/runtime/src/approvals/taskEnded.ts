import type { HumanRequest, TaskEnding, TroupeEvent } from '@troupe/protocol';
import { type KeyValue, throughOutages } from '../durable/kvStore.ts';
import type { StepJournal } from '../durable/stepJournal.ts';

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

/** How many times a request's close is written again over a record changed meanwhile but still pending. */
const CLOSE_ATTEMPTS = 3;

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
    // A write lost to one that left the record pending (a hold or let-go, the coordinator's or its asker's) is tried
    // again over it; one lost to a decision leaves that decision.
    for (let attempt = 0; attempt < CLOSE_ATTEMPTS; attempt++) {
      const entry = await throughOutages(() => deps.store.get(id));
      if (entry?.value.status !== 'pending') break;
      const written = await throughOutages(() =>
        deps.store.update(id, closedByEnding(entry.value, ending, deps.now()), entry.revision),
      );
      if (written !== undefined) {
        closed += 1;
        break;
      }
    }
  }
  return closed;
}
