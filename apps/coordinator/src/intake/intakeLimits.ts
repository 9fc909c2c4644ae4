import { DEFAULT_TASK_LIMITS, MAX_TASK_DEPTH, type TaskLimits } from '@troupe/protocol';

/**
 * What a task payload may be at most; a larger or deeper one is refused unread and reported on `_invalid`. The
 * numbers and the check live in `@troupe/protocol` (`TaskLimits`, `parseTask`), so the gateway refuses at its edge
 * exactly what a coordinator would.
 */
export type IntakeLimits = TaskLimits;

export const DEFAULT_INTAKE_LIMITS: IntakeLimits = DEFAULT_TASK_LIMITS;

export { MAX_TASK_DEPTH };

/** Where each limit is set, for the message that refuses a payload. */
export const LIMIT_FLAGS = { maxBytes: '--max-task-bytes', maxDepth: '--max-task-depth' } as const;
