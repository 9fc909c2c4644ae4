import type { HumanRequest } from '@troupe/protocol';
import type { KeyValue } from '../durable/kvStore.ts';
import type { StepJournal } from '../durable/stepJournal.ts';
import { heldRecord, letGoRecord } from './humanRequest.ts';
import { rewritePending } from './pendingRecord.ts';

/** What {@link holdTaskRequests} changes a task's pending requests to: held from a pause's start, or let go. */
export type RequestsHold = { hold: true; since: number } | { hold: false; stillResumed: () => boolean };

/**
 * Holds every pending request to a person that a task's steps asked (its journal lists them), as the coordinator
 * records the task's pause, or lets each held one go as it records the resume. The asker holds and lets go of its
 * own requests when it hears the pause and the resume; this does the same beside it, so that a request whose asker
 * is down then (its host died before the pause) is held too, not run out at its `expiresAt` while the task is
 * paused. Both write the record compared and set, the same way: a hold keeps the time left at the pause's start
 * (or at the request's, if later), a let-go gives it from now. A record held or let go already is left as it is, a
 * write lost to the asker's is tried again on the record as it is now, and a decided or closed record is never
 * touched, so a decision that got there first stands. A let-go stops once `stillResumed` says the task is paused
 * again. Returns how many records it changed.
 */
export async function holdTaskRequests(
  taskId: string,
  change: RequestsHold,
  deps: {
    journal: Pick<StepJournal, 'humanRequestsOf'>;
    store: KeyValue<HumanRequest>;
    now: () => number;
  },
): Promise<number> {
  let changed = 0;
  for (const id of await deps.journal.humanRequestsOf(taskId)) {
    if (!change.hold && !change.stillResumed()) break;
    const written = await rewritePending(deps.store, id, (record) => {
      if (change.hold === (record.held !== undefined)) return undefined;
      return change.hold
        ? heldRecord(record, Math.max(change.since, Date.parse(record.requestedAt)))
        : letGoRecord(record, deps.now());
    });
    if (written) changed += 1;
  }
  return changed;
}
