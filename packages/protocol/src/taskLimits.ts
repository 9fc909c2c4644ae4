import { MAX_MESSAGE_DEPTH, type ParseResult, parseMessage } from './parse.ts';
import { TaskSubmission } from './task.ts';

/**
 * What a task payload may be at most. The coordinator's intake and the gateway check the same numbers with the same
 * function ({@link parseTask}), so a task an edge accepts is one a coordinator runs.
 */
export interface TaskLimits {
  /** Bytes of the payload as published (the task's JSON). */
  maxTaskBytes: number;
  /** Levels of nested objects and arrays (`{"goal":"…"}` is 1). */
  maxTaskDepth: number;
}

/**
 * 256 KiB leaves room, within NATS's default 1 MB payload, for the events and checkpoints that carry a task's
 * input; 64 levels is deeper than any input a person writes. The depth stays below {@link MAX_TASK_DEPTH}, so the
 * events that carry the input stay readable.
 */
export const DEFAULT_TASK_LIMITS: TaskLimits = { maxTaskBytes: 256 * 1024, maxTaskDepth: 64 };

/** Room the events carrying a task's input add above it: `{ data: { input: … } }`. */
const EVENT_NESTING = 4;

/** The most `maxTaskDepth` may be raised to: every message is capped at {@link MAX_MESSAGE_DEPTH}. */
export const MAX_TASK_DEPTH = MAX_MESSAGE_DEPTH - EVENT_NESTING;

/**
 * A task payload decoded and checked: within `limits` (refused unread when larger or deeper, `limit` saying which),
 * then against {@link TaskSubmission}. Never throws, whatever the bytes.
 */
export function parseTask(
  bytes: Uint8Array | string,
  limits: TaskLimits = DEFAULT_TASK_LIMITS,
): ParseResult<TaskSubmission> {
  return parseMessage(TaskSubmission, bytes, {
    maxBytes: limits.maxTaskBytes,
    maxDepth: limits.maxTaskDepth,
  });
}
