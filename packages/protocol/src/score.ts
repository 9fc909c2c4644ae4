import { z } from 'zod';

/**
 * One score of one case: its value from 0 to 1, whether it passed its threshold, and why. Apart from `evals.ts`
 * (which reads events) so that the `eval.scored` event can carry scores without an import cycle.
 */
export const Score = z.object({
  scorer: z.string(),
  type: z.string(),
  value: z.number().min(0).max(1),
  threshold: z.number().min(0).max(1),
  pass: z.boolean(),
  reason: z.string(),
  /**
   * The scorer failed (it threw, or took longer than its time limit): the value is 0 and the reason says why. A
   * score is an error by this flag alone, never by its reason's words (a scorer may give `error: …` as a reason).
   */
  error: z.literal(true).optional(),
  /** What a judge's model calls cost, counted apart from the task's. */
  costUsd: z.number().nonnegative().optional(),
});
export type Score = z.infer<typeof Score>;
