import { BUCKETS, QueuedTask } from '@troupe/protocol';
import type { JetStreamBus, KeyValue, KvEntry, KvStore, UntilReachableOptions } from '@troupe/runtime/bus';
import { bucketIfAny } from './troupeState.ts';

/** The KV bucket `queued`: a mark for each task submitted through the gateway that no coordinator has claimed yet. */
export type QueuedStore = KeyValue<QueuedTask>;

/** KV `queued`, or undefined when no coordinator that makes it has run on the server (it marks nothing then). */
export const openQueuedStore = (
  bus: JetStreamBus,
  wait?: UntilReachableOptions,
): Promise<KvStore<typeof QueuedTask> | undefined> => bucketIfAny(bus, BUCKETS.queued, QueuedTask, wait);

/** How many times a compare-and-set on a mark is tried: each loss means the claim or another cancel wrote it. */
const TRIES = 3;

/** A queued task's mark, unless a claim has taken it (the task then has its record, which says where it stands). */
export async function readQueued(store: QueuedStore, taskId: string): Promise<QueuedTask | undefined> {
  const mark = (await store.get(taskId))?.value;
  return mark?.takenAt === undefined ? mark : undefined;
}

/**
 * Asks that a queued task be cancelled: written into its mark, so the claim that takes it ends it as cancelled
 * before any step runs. `queued` when the mark now holds a cancel (this one or an earlier one); `claimed` when a
 * coordinator took the task first, or none was marked: it is cancelled as a running task, through its coordinator.
 */
export async function cancelQueued(
  store: QueuedStore,
  taskId: string,
  cancel: { reason: string; at: string },
): Promise<'queued' | 'claimed'> {
  for (let tries = 0; tries < TRIES; tries++) {
    const entry = await store.get(taskId);
    if (!entry || entry.value.takenAt !== undefined) return 'claimed';
    if (entry.value.cancel) return 'queued';
    if ((await store.update(taskId, { ...entry.value, cancel }, entry.revision)) !== undefined)
      return 'queued';
  }
  return 'claimed';
}

/**
 * Takes a task's mark for the claim that holds its record, and says whether a cancel was asked while it waited. Once
 * taken, no cancel can be written to it (`cancelQueued` then goes to the coordinator). A mark without a cancel is
 * deleted; one with a cancel is kept, so a claim that dies before the task has ended finds it again on redelivery.
 */
export async function takeQueued(
  store: QueuedStore,
  taskId: string,
  at: string,
  known?: KvEntry<QueuedTask>,
): Promise<{ cancel?: string }> {
  for (let tries = 0; tries < TRIES; tries++) {
    // The mark as the caller read it saves a read on the first try; a lost compare reads it again.
    const entry = tries === 0 && known ? known : await store.get(taskId);
    if (!entry) return {};
    const { cancel, takenAt } = entry.value;
    if (takenAt !== undefined) {
      // Taken by an earlier claim of this task that died before it could delete the mark.
      if (!cancel) await store.delete(taskId);
      return cancel ? { cancel: cancel.reason } : {};
    }
    if ((await store.update(taskId, { ...entry.value, takenAt: at }, entry.revision)) === undefined) continue;
    if (cancel) return { cancel: cancel.reason };
    await store.delete(taskId);
    return {};
  }
  // Written by others three times in a row: each was a cancel (the claim's own writes do not race each other).
  const cancel = (await store.get(taskId))?.value.cancel;
  return cancel ? { cancel: cancel.reason } : {};
}
