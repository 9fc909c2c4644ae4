import { z } from 'zod';
import { MAX_MESSAGE_DEPTH, type ParseResult, parseMessage } from './parse.ts';
import { TaskSubmission } from './task.ts';

const encoder = new TextEncoder();

/**
 * What a task payload may be at most. The coordinator's intake and the gateway check the same numbers with the same
 * function ({@link parseTask}), so a task an edge accepts is one a coordinator runs.
 */
export interface TaskLimits {
  /** Bytes of the payload as published (the task's JSON). */
  maxTaskBytes: number;
  /** Levels of nested objects and arrays (`{"goal":"…"}` is 1). */
  maxTaskDepth: number;
  /**
   * Bytes of an input too large for the task message, stored whole in the pipeline's inputs bucket (its JSON): a
   * submitter stores an input there once the task would pass `maxTaskBytes`.
   */
  maxInputBytes: number;
}

/**
 * 256 KiB leaves room, within NATS's default 1 MB payload, for the events and checkpoints that carry a task's
 * input; 64 levels is deeper than any input a person writes. The depth stays below {@link MAX_TASK_DEPTH}, so the
 * events that carry the input stay readable. A larger input (up to 16 MiB: a long document, a few books) is stored,
 * and the task refers to it.
 */
export const DEFAULT_TASK_LIMITS: TaskLimits = {
  maxTaskBytes: 256 * 1024,
  maxTaskDepth: 64,
  maxInputBytes: 16 * 1024 * 1024,
};

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

const StoredInput = z.record(z.string(), z.unknown(), { error: 'the stored input is not a JSON object' });

/**
 * A stored task input (its JSON, as `inputRef` names it) decoded and checked: within `maxInputBytes` and
 * `maxTaskDepth`, and an object, as `input` is. Never throws.
 */
export function parseStoredInput(
  bytes: Uint8Array | string,
  limits: TaskLimits = DEFAULT_TASK_LIMITS,
): ParseResult<Record<string, unknown>> {
  return parseMessage(StoredInput, bytes, { maxBytes: limits.maxInputBytes, maxDepth: limits.maxTaskDepth });
}

/**
 * A task a submitter is about to publish, checked as a coordinator would take it: within the limits as it is, or,
 * when only its input makes it too large, with the input to store (its JSON, `storeInput`) and the task to publish
 * with an `inputRef` to it in place of `input`. The gateway, `troupe submit` and `pipeline` steps all go this way.
 */
export function checkTaskToSubmit(
  task: TaskSubmission,
  limits: TaskLimits = DEFAULT_TASK_LIMITS,
): ParseResult<TaskSubmission> & { storeInput?: string } {
  const whole = JSON.stringify(task);
  if (task.input === undefined || encoder.encode(whole).length <= limits.maxTaskBytes) {
    return parseTask(whole, limits);
  }
  const { input, ...rest } = task;
  const json = JSON.stringify(input);
  const size = encoder.encode(json).length;
  if (size > limits.maxInputBytes) {
    return {
      ok: false,
      reason: `the task's input is ${size} bytes; the limit is ${limits.maxInputBytes}`,
      issues: [],
      limit: 'maxBytes',
    };
  }
  const stored = parseStoredInput(json, limits);
  if (!stored.ok) return { ...stored, reason: stored.reason.replace(/^payload/, "the task's input") };
  const checked = parseTask(JSON.stringify(rest), limits);
  return checked.ok ? { ...checked, value: task, storeInput: json } : checked;
}
