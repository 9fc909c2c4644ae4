import { z } from 'zod';
import { TaskId } from './names.ts';

/** A person's decision on a pending approval, on `troupe.approvals.<pipeline>.<taskId>.<approvalId>`. */
export const ApprovalDecision = z.strictObject({
  decision: z.enum(['allow', 'deny']),
  reason: z.string().max(10_000).optional(),
  by: z.string().max(200).optional(),
});
export type ApprovalDecision = z.infer<typeof ApprovalDecision>;

/** A person's answer to an agent's question (the `ask_human` tool), on `troupe.approvals.<pipeline>.<taskId>.<questionId>`. */
export const HumanAnswer = z.strictObject({
  answer: z.string().min(1).max(100_000),
  by: z.string().max(200).optional(),
});
export type HumanAnswer = z.infer<typeof HumanAnswer>;

/** The reply to a decision or an answer: whether it reached the call that waits for it. */
export const DecisionReceipt = z.object({
  ok: z.literal(true),
  id: z.string(),
  /** What the waiting call now does: `allow`, `deny`, or `answered`. */
  outcome: z.enum(['allow', 'deny', 'answered']),
});
export type DecisionReceipt = z.infer<typeof DecisionReceipt>;

/** How a task ended: its final status and, for a failure, the reason code of its `task.failed` event. */
export const TaskEnding = z.object({
  status: z.enum(['completed', 'failed', 'cancelled']),
  reason: z.string().optional(),
});
export type TaskEnding = z.infer<typeof TaskEnding>;

/** What the KV bucket `approvals` holds for each question or approval a person was asked. */
export const HumanRequest = z.object({
  id: TaskId,
  kind: z.enum(['approval', 'question']),
  taskId: TaskId,
  pipeline: z.string(),
  agent: z.string(),
  stepId: z.string(),
  /** For approvals: the call waiting. */
  callId: z.string().optional(),
  tool: z.string().optional(),
  arguments: z.string().optional(),
  /** Why it was asked: the rule that says `ask`, or the agent's question. */
  prompt: z.string(),
  /** `closed`: its task ended while it was pending (see `taskEnded`); nothing waits for it any more. */
  status: z.enum(['pending', 'allowed', 'denied', 'answered', 'expired', 'closed']),
  requestedAt: z.string(),
  /** When a pending request is denied (or left unanswered) by default; while it is `held`, not at all. */
  expiresAt: z.string(),
  /**
   * Its task is paused (since `since`): the request does not run out and stays answerable; on resume its asker sets
   * `expiresAt` to the resume plus `leftMs`, the time it had left when the pause came, and drops `held`.
   */
  held: z.object({ since: z.string(), leftMs: z.number().int().nonnegative() }).optional(),
  decidedAt: z.string().optional(),
  by: z.string().optional(),
  reason: z.string().optional(),
  /** For questions: the answer given. */
  answer: z.string().optional(),
  /** For `closed` requests: how their task ended. */
  taskEnded: TaskEnding.optional(),
});
export type HumanRequest = z.infer<typeof HumanRequest>;

/** How many tell keys a task keeps (the newest): a key dropped past them is a new tell. */
export const MAX_TOLD_KEYS = 100;

/**
 * A control message for a running task, on `troupe.control.<taskId>`: `cancel` it, `migrate` it to another
 * version of its pipeline (`to`: a version's hash, or a unique prefix of at least 4 digits; the newest when absent),
 * `pause` it, `resume` it, or `tell` the agent at work something.
 */
export const ControlMessage = z.discriminatedUnion('action', [
  z.strictObject({
    action: z.literal('cancel'),
    reason: z.string().max(10_000).optional(),
  }),
  z.strictObject({
    action: z.literal('migrate'),
    to: z
      .string()
      .regex(/^[0-9a-f]{4,64}$/, 'must be a version hash, or a prefix of one of at least 4 hex digits')
      .optional(),
  }),
  /** Hold the task once the step at work has finished its current model or tool call (see docs/durability.md). */
  z.strictObject({
    action: z.literal('pause'),
    reason: z.string().max(10_000).optional(),
    by: z.string().max(200).optional(),
  }),
  /** Let a paused task go on from where it was held. */
  z.strictObject({ action: z.literal('resume'), by: z.string().max(200).optional() }),
  /** A person's message for the agent at work: it reads it before its next model call, as a user turn. */
  z.strictObject({
    action: z.literal('tell'),
    text: z.string().trim().min(1, 'must not be empty').max(100_000),
    by: z.string().max(200).optional(),
    /**
     * The sender's idempotency key (a uuid, say): a tell with a key the task took already is answered with that
     * message's id and changes nothing, so a retry after a lost answer is not told twice (the task keeps its last
     * {@link MAX_TOLD_KEYS} keys).
     */
    key: z.string().min(1, 'must not be empty').max(100).optional(),
  }),
]);
export type ControlMessage = z.infer<typeof ControlMessage>;

/**
 * The reply to a control message that changed the task: the coordinator running it stopped it (`cancelled`),
 * moved it to version `to` from `from` (`migrated`: it resumes there at once), holds it (`paused`: recorded, so it
 * stays paused across a restart), let it go on (`resumed`), or took a message for it (`told`, with the message's id,
 * recorded before this reply).
 */
export const ControlReceipt = z.object({
  ok: z.literal(true),
  taskId: TaskId,
  outcome: z.enum(['cancelled', 'migrated', 'paused', 'resumed', 'told']),
  from: z.string().optional(),
  to: z.string().optional(),
  messageId: z.string().optional(),
});
export type ControlReceipt = z.infer<typeof ControlReceipt>;

/**
 * Error codes of the answer to a control message that changed nothing, each with a message saying the task's state:
 * `unknown_task` (no task has this id), `task_ended` (it already completed, failed or was cancelled), `not_running`
 * (it has not ended, but no coordinator runs it right now: it resumes when its message is delivered again),
 * `unknown_version` (a migration to a version that is not stored, or a prefix that names none or several),
 * `not_migratable` (the task's state does not fit the version asked for, with the reason), `already_paused` (a pause
 * for a task held already), `not_paused` (a resume for a task that is not held), `told_backlog` (a tell for a task
 * holding as many unread messages as it may: told again once a step has read them).
 */
export const ControlRefusal = z.enum([
  'unknown_task',
  'task_ended',
  'not_running',
  'unknown_version',
  'not_migratable',
  'already_paused',
  'not_paused',
  'told_backlog',
]);
export type ControlRefusal = z.infer<typeof ControlRefusal>;

/** The reply sent when a request fails validation or cannot be served. */
export const ErrorReply = z.object({
  ok: z.literal(false),
  error: z.object({ code: z.string(), message: z.string() }),
});
export type ErrorReply = z.infer<typeof ErrorReply>;
