import { z } from 'zod';
import { Name, TaskId } from './names.ts';
import { TaskOriginRef } from './task.ts';

/**
 * A task stored in `TASKS` that no coordinator has claimed yet, as its submitter marked it in the KV bucket `queued`
 * (key = task id) just before publishing it: what makes it visible, and cancellable, before it has a record in
 * `workflows`. The claim that creates the record takes the mark (`takenAt`, then deletes it); a mark with `cancel`
 * that a claim finds ends the task as cancelled before any step runs.
 */
export const QueuedTask = z.object({
  taskId: TaskId,
  pipeline: Name,
  goal: z.string(),
  metadata: z.record(z.string(), z.string()).optional(),
  /** When it was submitted (ISO 8601). */
  submittedAt: z.string(),
  /**
   * A restart's or fork's origin: a request again with the same idempotency key is compared with it before a
   * coordinator has claimed the task (its record holds it then).
   */
  origin: TaskOriginRef.optional(),
  /**
   * A cancel asked while it waited: the claim ends it as cancelled with this reason, running none of its steps. As
   * long as a running task's cancel may give (`ControlMessage`): the gateway adds its token's name to the 2,000
   * characters a client may send.
   */
  cancel: z.object({ reason: z.string().max(10_000), at: z.string() }).optional(),
  /** Set by the claim that took the task: a cancel written after it would be lost, so none may be. */
  takenAt: z.string().optional(),
});
export type QueuedTask = z.infer<typeof QueuedTask>;

/**
 * The header a submitter that marked its task (or tried to: a write whose reply was lost may have landed) sets on the
 * task message (any value; `1` by convention): the only messages whose mark a coordinator reads, so a task from
 * `troupe submit` or a plain NATS client costs no read of KV `queued`. It is stored with the message, so every
 * redelivery carries it too.
 */
export const QUEUED_MARK_HEADER = 'Troupe-Queued-Mark';
