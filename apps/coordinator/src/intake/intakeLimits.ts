import { MAX_MESSAGE_DEPTH } from '@troupe/protocol';

/** What a task payload may be at most; a larger or deeper one is refused unread and reported on `_invalid`. */
export interface IntakeLimits {
  /** Bytes of the payload as published. */
  maxTaskBytes: number;
  /** Levels of nested objects and arrays (`{"goal":"…"}` is 1). */
  maxTaskDepth: number;
}

/**
 * 256 KiB leaves room, within NATS's default 1 MB payload, for the events and checkpoints that carry a task's
 * input; 64 levels is deeper than any input a person writes. The depth stays below {@link MAX_MESSAGE_DEPTH}, the
 * limit every process applies to every message, so the events that carry the input stay readable.
 */
export const DEFAULT_INTAKE_LIMITS: IntakeLimits = { maxTaskBytes: 256 * 1024, maxTaskDepth: 64 };

/** Room the events carrying a task's input add above it: `{ data: { input: … } }`. */
const EVENT_NESTING = 4;

/** The most a user may raise `maxTaskDepth` to. */
export const MAX_TASK_DEPTH = MAX_MESSAGE_DEPTH - EVENT_NESTING;

/** Where each limit is set, for the message that refuses a payload. */
export const LIMIT_FLAGS = { maxBytes: '--max-task-bytes', maxDepth: '--max-task-depth' } as const;
