import { emptyUsage, type TroupeEvent } from '@troupe/protocol';
import type { EventScope } from '@troupe/runtime';
import type { TaskServices } from '../task/taskServices.ts';
import { announce } from './claim.ts';
import { recordUnrun } from './queuedMark.ts';
import { childTraceparent } from './taskTrace.ts';
import type { TriagedTask } from './triage.ts';

export type QueuedCancelServices = Pick<
  TaskServices,
  'pipeline' | 'store' | 'clock' | 'logger' | 'bus' | 'events' | 'versions' | 'queued'
>;

/**
 * Ends a task cancelled while it waited in `TASKS` (its mark in KV `queued` holds the cancel): its record is created
 * as cancelled, its `task.accepted` goes out, and its `task.cancelled` is concluded as for any ended task, with no
 * claim, so none of its steps runs. Undefined when there is no such cancel, or when the task has a record already: a
 * claim created it first, and that claim takes the mark and cancels the task as it starts.
 */
export async function endCancelledWhileQueued(
  services: QueuedCancelServices,
  task: TriagedTask,
): Promise<{ next: 'conclude'; final: TroupeEvent } | undefined> {
  const { pipeline, logger, queued, events } = services;
  const mark = task.queued?.value;
  const cancel = mark?.takenAt === undefined ? mark?.cancel : undefined;
  if (!queued || !cancel) return undefined;
  const { taskId, submission, delivery } = task;
  const scope: EventScope = {
    pipeline,
    taskId,
    traceparent: childTraceparent(submission.parent?.traceparent),
  };
  const final = events.make(
    'task.cancelled',
    scope,
    { reason: cancel.reason, usage: emptyUsage() },
    { from: 'user', to: pipeline },
  );
  const version = (await services.versions.newest()).hash;
  const { goal, metadata } = submission;
  const created = await recordUnrun(services, {
    taskId,
    delivery,
    status: 'cancelled',
    goal,
    metadata,
    version,
    final,
  });
  if (!created) return undefined;
  announce(services, scope, task);
  logger.info({ taskId, reason: cancel.reason }, 'task cancelled while it was queued; none of its steps ran');
  // The record says it all now; a mark left (the delete failed) is read as nothing, the record being there.
  await queued.delete(taskId).catch(() => undefined);
  return { next: 'conclude', final };
}
