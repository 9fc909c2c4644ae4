import { emptyUsage, QUEUED_MARK_HEADER, type QueuedTask, type TroupeEvent } from '@troupe/protocol';
import { type KvEntry, newTraceparent } from '@troupe/runtime';
import type { TaskServices } from '../task/taskServices.ts';
import { dropMark, readMark, recordUnrun } from './queuedMark.ts';
import type { TaskDelivery } from './taskQueue.ts';

export type QueuedRefusalServices = Pick<
  TaskServices,
  'pipeline' | 'store' | 'clock' | 'logger' | 'queued' | 'finalEvents'
>;

/**
 * Ends a refused task that its submitter marked queued (the gateway told its client the id, and shows it `submitted`
 * until it has a record): it is recorded `failed` with reason `refused` and the refusal's reason, its `task.failed`
 * is concluded as for any ended task, and its mark is deleted, so the task ends visibly rather than wait forever. A
 * task with no mark is known to nobody by its id: it is only reported on `_invalid`, as before. Undefined when the task
 * has no mark of this pipeline, its mark cannot be read (logged; the refusal stands, on `_invalid`), or another task
 * holds the id's record.
 */
export async function endRefusedQueued(
  services: QueuedRefusalServices,
  delivery: TaskDelivery,
  task: { taskId: string | undefined; goal?: string; metadata?: Record<string, string> },
  reason: string,
  known?: KvEntry<QueuedTask>,
): Promise<{ next: 'conclude'; final: TroupeEvent } | undefined> {
  const { pipeline, store, logger, finalEvents } = services;
  const { taskId } = task;
  if (taskId === undefined || !services.queued || delivery.headers[QUEUED_MARK_HEADER] === undefined)
    return undefined;
  // Delivered again after an earlier delivery recorded the refusal (and deleted the mark), its coordinator dying before
  // it settled the message: its stored end goes out again (same event id).
  if (delivery.deliveryCount > 1) {
    const recorded = (await store.get(taskId))?.value;
    if (recorded?.streamSequence === delivery.streamSequence && recorded.final) {
      await dropMark(services, delivery, taskId, known);
      return { next: 'conclude', final: recorded.final };
    }
  }
  const mark =
    known ??
    (await readMark(services, delivery, taskId).catch((error: unknown) => {
      logger.warn({ err: error, taskId }, `cannot read the mark of refused task ${taskId} in KV queued`);
      return undefined;
    }));
  // Taken: a claim holds the task's record, and its run ends it.
  if (!mark || mark.value.takenAt !== undefined) return undefined;
  const scope = { pipeline, taskId, traceparent: newTraceparent() };
  const final = finalEvents.failed(scope, 'refused', reason, emptyUsage(), 0);
  const goal = task.goal ?? mark.value.goal;
  const metadata = task.metadata ?? mark.value.metadata;
  const created = await recordUnrun(services, { taskId, delivery, status: 'failed', goal, metadata, final });
  if (!created) return undefined;
  logger.info({ taskId, reason }, 'a queued task was refused; recorded as failed, and its mark deleted');
  await dropMark(services, delivery, taskId, mark);
  return { next: 'conclude', final };
}
