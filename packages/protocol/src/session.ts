import { z } from 'zod';
import { ErrorReply } from './control.ts';
import { ConversationSummary } from './modelReply.ts';
import { Name, TaskId } from './names.ts';

/** One earlier turn of a session, as its summarizer reads it. */
export const SessionTurn = z.object({
  taskId: TaskId,
  goal: z.string(),
  /** How the turn's task ended: `completed`, `failed`, `cancelled`, or `unknown` when no record of it is left. */
  status: z.string(),
  /** The task's output, or why it failed. */
  result: z.string(),
});
export type SessionTurn = z.infer<typeof SessionTurn>;

/**
 * A request to fold a session's older turns into its running summary, sent by a gateway on
 * `troupe.agents.<pipeline>.<agent>.summarize` to the agent that summarizes the pipeline's sessions. Its model
 * writes the summary, as it condenses the older turns of its own conversation.
 */
export const SessionSummaryRequest = z.object({
  pipeline: Name,
  agent: Name,
  session: z.string().min(1).max(64),
  /** The follow-up task the summary is made for: its events carry the `session.compacted` that reports the call. */
  taskId: TaskId,
  /** The summary so far, of the turns before these. */
  previous: z.string().max(100_000).optional(),
  /** How many turns the summary so far covers. */
  covered: z.number().int().nonnegative(),
  /** The turns to fold in, oldest first. */
  turns: z.array(SessionTurn).min(1).max(1_000),
});
export type SessionSummaryRequest = z.infer<typeof SessionSummaryRequest>;

/** The summary, with the model call that wrote it; or why there is none. */
export const SessionSummaryReply = z.union([
  z.object({ ok: z.literal(true), summary: ConversationSummary.required({ provider: true, model: true }) }),
  ErrorReply,
]);
export type SessionSummaryReply = z.infer<typeof SessionSummaryReply>;
