import { randomUUID } from 'node:crypto';
import { emptyUsage, QUEUED_MARK_HEADER, type QueuedTask, type TroupeEvent } from '@troupe/protocol';
import type { KvEntry } from '@troupe/runtime';
import { isoNow, type TaskServices } from '../task/taskServices.ts';
import type { TaskDelivery } from './taskQueue.ts';

export type QueuedMarkServices = Pick<TaskServices, 'pipeline' | 'queued' | 'logger'>;

/**
 * This pipeline's mark of a task, read only when its message says it has one (the header is stored with the message,
 * so a redelivery says it too): a task from `troupe submit` or a plain NATS client makes no round trip for one. A
 * mark naming another pipeline is another task's with the same id, and read as none. Throws when KV `queued` cannot
 * be read.
 */
export async function readMark(
  { pipeline, queued }: QueuedMarkServices,
  delivery: Pick<TaskDelivery, 'headers'>,
  taskId: string,
): Promise<KvEntry<QueuedTask> | undefined> {
  if (!queued || delivery.headers[QUEUED_MARK_HEADER] === undefined) return undefined;
  const marked = await queued.get(taskId);
  return marked?.value.pipeline === pipeline ? marked : undefined;
}

/**
 * Deletes the mark of a task that has ended (or will never run from this message), so it is not shown `submitted`
 * forever: the one triage read (`known`), or else this pipeline's, read now. Never throws: a mark that cannot be
 * deleted is logged, and a reader that finds the task's record reads that rather than the mark.
 */
export async function dropMark(
  services: QueuedMarkServices,
  delivery: Pick<TaskDelivery, 'headers'>,
  taskId: string,
  known?: KvEntry<QueuedTask>,
): Promise<void> {
  const { queued, logger } = services;
  if (!queued) return;
  try {
    const mark = known ?? (await readMark(services, delivery, taskId));
    if (mark) await queued.delete(taskId);
  } catch (error) {
    logger.warn(
      { err: error, taskId },
      `cannot delete the mark of task ${taskId} in KV queued, which has ended`,
    );
  }
}

/** What a queued task that ends from its message, never run, is recorded with. */
export interface UnrunEnding {
  taskId: string;
  delivery: Pick<TaskDelivery, 'streamSequence'>;
  status: 'cancelled' | 'failed';
  goal: string;
  metadata?: Record<string, string> | undefined;
  version?: string;
  final: TroupeEvent;
}

/**
 * Creates the record of a queued task that ends without running (cancelled while it waited, or refused), its final
 * event in it. False when the id has a record already: a claim made it first, and that run ends the task.
 */
export async function recordUnrun(
  { pipeline, store, clock }: Pick<TaskServices, 'pipeline' | 'store' | 'clock'>,
  ending: UnrunEnding,
): Promise<boolean> {
  const { taskId, delivery, status, goal, metadata, version, final } = ending;
  const now = isoNow(clock);
  const created = await store.create(taskId, {
    taskId,
    pipeline,
    streamSequence: delivery.streamSequence,
    status,
    state: status,
    ...(version === undefined ? {} : { version }),
    goal,
    ...(metadata ? { metadata } : {}),
    round: 1,
    usage: emptyUsage(),
    createdAt: now,
    updatedAt: now,
    final,
    // A token of this ending's own: a claim of the same task finds the record another's and leaves it.
    lease: randomUUID(),
  });
  return created !== undefined;
}
