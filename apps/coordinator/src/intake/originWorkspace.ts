import { firstStarted, type ReusedWorkspace, reusedWorkspace } from '@troupe/client';
import type { TaskOrigin, TroupeEvent, WorkflowRecord } from '@troupe/protocol';
import type { TaskServices } from '../task/taskServices.ts';

/** Most origins followed back to the task that ran a step: a bound on reads, not a length any chain should reach. */
const MAX_ORIGINS_BACK = 16;

/**
 * The workspace files a restart or fork from `origin.step` starts with: those the origin's `step.started` of that
 * step recorded, unless the origin, itself a restart or fork from a later step, only reused it. A reused step's
 * `step.started` records the files its task started with, which the steps after it wrote (and lacks those they
 * removed), not the files the step's own run had; those are in the events of the task that ran it, found by following
 * the origins back (within this pipeline) while every step before it there was reused. An older origin that cannot
 * be read leaves the nearest one's record.
 */
export async function originWorkspace(
  { pipeline, store, taskEvents }: Pick<TaskServices, 'pipeline' | 'store' | 'taskEvents'>,
  origin: Pick<TaskOrigin, 'taskId' | 'step'>,
  record: WorkflowRecord,
  events: readonly TroupeEvent[],
): Promise<ReusedWorkspace> {
  const { step } = origin;
  let ran = { taskId: origin.taskId, record, events };
  for (let back = 0; back < MAX_ORIGINS_BACK; back++) {
    const before = ran.record.origin;
    if (!before) break;
    const started = firstStarted(ran.events, step);
    // Started at or after where this task began to run steps of its own: its record is the step's own.
    if (started < 0 || started >= firstStarted(ran.events, before.step)) break;
    // A step this task ran before it (a fork's changed foreach item, a person asked again) handed on files of this
    // task's own, which the older task's record lacks: this record, with them, is the nearer of the two.
    if (ran.events.slice(0, started).some((e) => e.kind === 'step.completed' && e.data.ok && !e.data.reused))
      break;
    const older = (await store.get(before.taskId))?.value;
    if (!older || older.pipeline !== pipeline) break;
    const olderEvents = await taskEvents(before.taskId, pipeline);
    if (firstStarted(olderEvents, step) < 0) break;
    ran = { taskId: before.taskId, record: older, events: olderEvents };
  }
  return reusedWorkspace(ran.events, { taskId: ran.taskId, step });
}
