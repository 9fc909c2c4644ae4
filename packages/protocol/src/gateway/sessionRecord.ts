import { z } from 'zod';
import { ConversationSummary, TokenUsage } from '../modelReply.ts';
import { Name } from '../names.ts';

/**
 * A session id: `s-` and 16 random characters, or the client's own: letters, digits, `_` and `-`, at most 48 (its
 * tasks are `<session>-<n>-<6 random characters>`, and a task id has at most 64).
 */
export const SessionId = z.string().regex(/^[A-Za-z0-9_-]{1,48}$/, 'letters, digits, _ and -, at most 48');
export type SessionId = z.infer<typeof SessionId>;

/** The running summary of a session's older turns, written by the pipeline's summarizer agent. */
export const SessionSummary = z.object({
  text: z.string(),
  /** How many of the session's first turns it covers. */
  turns: z.number().int().positive(),
  /** The agent and model that wrote it, and what the last call that folded turns into it spent. */
  agent: Name,
  provider: z.string(),
  model: z.string(),
  usage: TokenUsage,
  costUsd: z.number(),
  at: z.string(),
});
export type SessionSummary = z.infer<typeof SessionSummary>;

/**
 * What the KV bucket `sessions` keeps of a session: its pipeline, the tasks its messages ran, in order, and the
 * summary of the older ones.
 */
export const SessionRecord = z.object({
  id: SessionId,
  pipeline: Name,
  /** The token that opened it: only tokens that may use its pipeline see it. */
  createdBy: z.string(),
  createdAt: z.string(),
  updatedAt: z.string(),
  turns: z.array(z.object({ taskId: z.string(), goal: z.string(), at: z.string() })),
  summary: SessionSummary.optional(),
});
export type SessionRecord = z.infer<typeof SessionRecord>;

/** A summarizer's reply with the summary written. */
export const SessionSummaryWritten = z.object({
  ok: z.literal(true),
  summary: ConversationSummary.required({ provider: true, model: true }),
});
export type SessionSummaryWritten = z.infer<typeof SessionSummaryWritten>;
