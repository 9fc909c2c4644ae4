import { randomUUID } from 'node:crypto';
import { emptyUsage, subjects, type TroupeEvent, type WorkflowRecord } from '@troupe/protocol';
import { newTraceparent, throughOutages } from '@troupe/runtime';
import { isoNow, type TaskServices } from '../task/taskServices.ts';
import { dropMark } from './queuedMark.ts';
import { traceOf } from './taskTrace.ts';
import type { TriagedTask } from './triage.ts';

/** How giving up went: recorded (the final event goes out, the message is terminated), or lost to another run. */
export type GiveUp =
  | { next: 'conclude'; final: TroupeEvent; settle: 'term' }
  /** The record changed since it was read (another coordinator runs the task), or could not be written. */
  | { next: 'handBack' };

export type GiveUpServices = Pick<
  TaskServices,
  'pipeline' | 'store' | 'clock' | 'logger' | 'finalEvents' | 'deadLetter' | 'queued'
>;

/**
 * A task that was delivered `maxDeliver` times in a row without making progress (coordinators kept dying under
 * it) is not run again: it is stored on the dead-letter subject with the reason, and ends with task.failed
 * (max_deliveries). A mark it had in KV `queued` is deleted, so the task is not shown waiting forever.
 */
export async function giveUp(services: GiveUpServices, task: TriagedTask): Promise<GiveUp> {
  const { pipeline, store, clock, logger } = services;
  const { delivery, taskId, entry, stalls } = task;
  const existing = entry?.value;
  const message = `task ${taskId} was delivered ${stalls} times without finishing or making progress; it is given up on and stored on ${subjects.deadLetter(pipeline)}`;
  const scope = {
    pipeline,
    taskId,
    traceparent: existing ? traceOf(existing.snapshot, existing.traceparent) : newTraceparent(),
  };
  const usage = existing?.usage ?? emptyUsage();
  const durationMs = existing ? Math.max(0, clock.now() - Date.parse(existing.createdAt)) : 0;
  const final = services.finalEvents.failed(scope, 'max_deliveries', message, usage, durationMs);
  // A token of this ending's own: a run that still thinks it owns the task finds another's and stops.
  const lease = randomUUID();
  const now = isoNow(clock);
  const ended: WorkflowRecord = existing
    ? { ...existing, status: 'failed', state: 'failed', updatedAt: now, final, lease }
    : {
        taskId,
        pipeline,
        streamSequence: delivery.streamSequence,
        status: 'failed',
        state: 'failed',
        goal: '',
        round: 1,
        usage,
        createdAt: now,
        updatedAt: now,
        final,
        lease,
      };
  // Only over the record as read: if another coordinator wrote it since, it runs the task, and this leaves it be.
  const written = await throughOutages(() =>
    entry ? store.update(taskId, ended, entry.revision) : store.create(taskId, ended),
  ).catch((error: unknown) => {
    logger.error({ err: error, taskId }, 'cannot record that the task was given up on');
    return undefined;
  });
  if (written === undefined) return { next: 'handBack' };
  logger.error({ taskId, deliveries: stalls }, message);
  await services.deadLetter(pipeline, { ...delivery, deliveries: stalls }, { taskId, message });
  await dropMark(services, delivery, taskId, task.queued);
  return { next: 'conclude', final, settle: 'term' };
}
