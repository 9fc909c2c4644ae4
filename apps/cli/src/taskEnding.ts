import type { TroupeEvent, WorkflowRecord } from '@troupe/protocol';
import type { EventFeed } from './eventFeed.ts';
import type { FinalTracker } from './watch.ts';
import type { WorkflowStore } from './workflowRecords.ts';

/**
 * How long a follower that reads in the task's record that it has ended waits for the final event to arrive
 * live (the record is written just before the event is published) before it reads the stream again.
 */
const FINAL_EVENT_GRACE_MS = 3_000;

/**
 * Waits for the task's final event. The record in KV says it too, and first: should the live subscription have
 * missed the event (a reconnect), the stream is read again, and as a last resort the record's copy is shown.
 */
export async function untilEnded(follow: {
  taskId: string;
  store: WorkflowStore | undefined;
  feed: EventFeed;
  final: FinalTracker;
  print(event: TroupeEvent): void;
}): Promise<number> {
  let onRecordEnded: (record: WorkflowRecord) => void = () => {};
  const recordEnded = new Promise<WorkflowRecord>((resolve) => (onRecordEnded = resolve));
  const unwatch = await follow.store?.watch(follow.taskId, (entry) => {
    if (entry.value.status !== 'running') onRecordEnded(entry.value);
  });
  try {
    const first = await Promise.race([follow.final.arrived, recordEnded]);
    if ('kind' in first) return exitCodeOf(first.kind);
    const late = await within(follow.final.arrived, FINAL_EVENT_GRACE_MS);
    if (late) return exitCodeOf(late.kind);
    // A user who may not read the stored events (a role given none, or not this pipeline's) goes on to the record's
    // copy; a submitter may read its pipelines' (docs/permissions.md).
    await follow.feed.catchUp().catch(() => undefined);
    const caught = follow.final.current;
    if (caught) return exitCodeOf(caught.kind);
    if (first.final) follow.print(first.final);
    return exitCodeOf(first.status);
  } finally {
    unwatch?.();
  }
}

export const exitCodeOf = (ending: string): number =>
  ending === 'task.completed' || ending === 'completed' ? 0 : 1;

/** What `work` resolves with within `ms`, else undefined; the timer does not outlive the wait. */
async function within<T>(work: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
  });
  try {
    return await Promise.race([work, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
