import { z } from 'zod';

/** The tokens of one model call. */
export const TokenUsage = z.object({
  inputTokens: z.number(),
  outputTokens: z.number(),
  /** Input tokens read from the provider's prompt cache (a subset of inputTokens). */
  cachedTokens: z.number(),
  /** Input tokens written to the prompt cache (a subset of inputTokens); absent means none. */
  cacheWriteTokens: z.number().optional(),
  /** Of `cacheWriteTokens`, those written with the 1-hour lifetime. */
  cacheWrite1hTokens: z.number().optional(),
});
export type TokenUsage = z.infer<typeof TokenUsage>;

/**
 * A model's reply to one turn of a step: what the agent acts on, what the step journal keeps (so a step run again
 * does not ask the model twice) and what `llm.response` reports. One type for the agent and the journal.
 */
export const ModelReply = z.object({
  content: z.string(),
  /** The tool calls the model asked for; `arguments` is the raw JSON text it produced. */
  toolCalls: z.array(z.object({ id: z.string(), name: z.string(), arguments: z.string() })),
  usage: TokenUsage,
  costUsd: z.number(),
  finishReason: z.string(),
  provider: z.string(),
  model: z.string(),
  durationMs: z.number(),
  /** The reply was recorded by an earlier run of the step; the model was not asked again. */
  journaled: z.boolean().optional(),
});
export type ModelReply = z.infer<typeof ModelReply>;

/** A summary that replaced the older part of a conversation grown past the agent's `contextTokens`. */
export const ConversationSummary = z.object({
  summary: z.string(),
  usage: TokenUsage,
  costUsd: z.number(),
  /** The model that wrote it (a fallback, when the agent's primary kept failing); absent in older records. */
  provider: z.string().optional(),
  model: z.string().optional(),
  durationMs: z.number().optional(),
  /** The summary was recorded by an earlier run of the step; the model was not asked again. */
  journaled: z.boolean().optional(),
});
export type ConversationSummary = z.infer<typeof ConversationSummary>;
