import { z } from 'zod';
import { Name, TaskId } from '../names.ts';

/** Where a config's deliveries stand: after `seq` (an `EVENTS` sequence), and `part` bodies into the event after it. */
export const PushCursor = z.object({
  seq: z.number().int().nonnegative(),
  part: z.number().int().nonnegative(),
});
export type PushCursor = z.infer<typeof PushCursor>;

/**
 * How far a config's webhook got: `active` while the task may still change, `done` once its final state was
 * delivered, `dropped` when its receiver failed for longer than the gateway waits (with the last error).
 */
export const PushDeliveryState = z.object({
  state: z.enum(['active', 'done', 'dropped']),
  cursor: PushCursor,
  /** How many bodies were delivered. */
  delivered: z.number().int().nonnegative(),
  /** Failed attempts in a row at the body the cursor points to. */
  attempts: z.number().int().nonnegative(),
  /** When the current run of failures began. */
  failingSince: z.string().optional(),
  lastError: z.string().optional(),
  endedAt: z.string().optional(),
});
export type PushDeliveryState = z.infer<typeof PushDeliveryState>;

/** What the bucket `a2a-push` keeps per config (key `<taskId>.<configId>`). */
export const StoredPushConfig = z.object({
  taskId: TaskId,
  /** The task's pipeline: only a token that may read the pipeline's tasks may see or change its configs. */
  pipeline: Name,
  /** The A2A context (session) of the task, which every body names; else the one the task was submitted with. */
  contextId: z.string().optional(),
  /** The token that made it. */
  createdBy: z.string(),
  createdAt: z.string(),
  /** The config in A2A's JSON form (`TaskPushNotificationConfig.toJSON`), its id filled. */
  config: z.record(z.string(), z.unknown()),
  delivery: PushDeliveryState,
});
export type StoredPushConfig = z.infer<typeof StoredPushConfig>;
