import { z } from 'zod';
import { Name, TaskId } from '../names.ts';
import { ClientTask } from './httpApi.ts';

const RequestId = z.string().min(1).max(100).optional();
const By = z.string().min(1).max(100).optional();

/**
 * What a WebSocket client sends, one JSON object per message. `id` is the client's own, echoed in the reply.
 */
export const ClientMessage = z.discriminatedUnion('type', [
  /** Follow a task's events: history first, then live, after `after` (a stream sequence) when given. */
  z.strictObject({
    type: z.literal('subscribe'),
    id: RequestId,
    taskId: TaskId,
    after: z.number().int().nonnegative().optional(),
    format: z.enum(['troupe', 'ag-ui']).optional(),
  }),
  z.strictObject({ type: z.literal('unsubscribe'), id: RequestId, taskId: TaskId }),
  z.strictObject({
    type: z.literal('submit'),
    id: RequestId,
    pipeline: Name,
    task: ClientTask,
    idempotencyKey: z.string().min(1).max(200).optional(),
  }),
  z.strictObject({
    type: z.literal('cancel'),
    id: RequestId,
    taskId: TaskId,
    reason: z.string().max(2_000).optional(),
  }),
  /** Hold a running task once its step at work has finished its current model or tool call. */
  z.strictObject({
    type: z.literal('pause'),
    id: RequestId,
    taskId: TaskId,
    reason: z.string().max(2_000).optional(),
    by: By,
  }),
  z.strictObject({ type: z.literal('resume'), id: RequestId, taskId: TaskId, by: By }),
  /** A message for the agent at work, read before its next model call. */
  z.strictObject({
    type: z.literal('tell'),
    id: RequestId,
    taskId: TaskId,
    text: z.string().trim().min(1, 'must not be empty').max(100_000),
    by: By,
    /** A retry with the same key tells nothing new (per token), as the HTTP route's `Idempotency-Key`. */
    idempotencyKey: z.string().min(1).max(200).optional(),
  }),
  /** Run an ended task again from a step, as a new task (the reply's `taskId`). */
  z.strictObject({
    type: z.literal('restart'),
    id: RequestId,
    taskId: TaskId,
    from: z.string().min(1).max(64),
    newest: z.literal(true).optional(),
    by: By,
    /** Makes the new task's id (per token, task and operation), as the HTTP route's `Idempotency-Key`. */
    idempotencyKey: z.string().min(1).max(200).optional(),
  }),
  /** Start a new task from an ended one at a step, with its input or earlier steps' outputs edited. */
  z.strictObject({
    type: z.literal('fork'),
    id: RequestId,
    taskId: TaskId,
    at: z.string().min(1).max(64),
    input: z.record(z.string(), z.unknown()).optional(),
    set: z.record(z.string().min(1).max(64), z.string().max(100_000)).optional(),
    newest: z.literal(true).optional(),
    by: By,
    idempotencyKey: z.string().min(1).max(200).optional(),
  }),
  z.strictObject({
    type: z.literal('approve'),
    id: RequestId,
    requestId: z.string().min(1).max(200),
    by: By,
  }),
  z.strictObject({
    type: z.literal('deny'),
    id: RequestId,
    requestId: z.string().min(1).max(200),
    reason: z.string().min(1).max(10_000),
    by: By,
  }),
  z.strictObject({
    type: z.literal('answer'),
    id: RequestId,
    requestId: z.string().min(1).max(200),
    answer: z.string().min(1).max(100_000),
    by: By,
  }),
]);
export type ClientMessage = z.infer<typeof ClientMessage>;
