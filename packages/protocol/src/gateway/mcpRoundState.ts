import { z } from 'zod';

/**
 * Where a pipeline tool's call stands between the rounds of a call that asked the user something (2026-07-28's
 * `input_required`, and the 2025 shim that plays it as elicitation): the task it runs, the stream sequence of the
 * event that asked, what was asked, and the progress count so far. The client holds it, signed, between rounds.
 */
export const McpRoundState = z.strictObject({
  taskId: z.string(),
  pipeline: z.string(),
  /** The caller it was minted for: a state is never honoured for another. */
  who: z.string(),
  /** The `EVENTS` sequence of the request's event: the next round follows the task from after it. */
  after: z.number().int().nonnegative(),
  /** The approval or question asked. */
  asked: z.string(),
  progress: z.number().int().nonnegative(),
  /** True when the question was asked with its step's declared answer form, whose fields are the answer. */
  declared: z.boolean().optional(),
});
export type McpRoundState = z.infer<typeof McpRoundState>;
