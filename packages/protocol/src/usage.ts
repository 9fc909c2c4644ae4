import { z } from 'zod';

/** Tokens (and cost, where known) spent by a model call, a step or a task. */
export const UsageTotals = z.object({
  inputTokens: z.number().int().nonnegative(),
  outputTokens: z.number().int().nonnegative(),
  /** Input tokens read from the prompt cache (a subset of inputTokens). */
  cachedTokens: z.number().int().nonnegative(),
  /** Input tokens written to the prompt cache (a subset of inputTokens); absent in records from before caching. */
  cacheWriteTokens: z.number().int().nonnegative().optional(),
  costUsd: z.number().nonnegative(),
  modelCalls: z.number().int().nonnegative(),
});
export type UsageTotals = z.infer<typeof UsageTotals>;

export const emptyUsage = (): UsageTotals => ({
  inputTokens: 0,
  outputTokens: 0,
  cachedTokens: 0,
  costUsd: 0,
  modelCalls: 0,
});

export const sumUsage = (a: UsageTotals, b: UsageTotals): UsageTotals => {
  const writes = (a.cacheWriteTokens ?? 0) + (b.cacheWriteTokens ?? 0);
  return {
    inputTokens: a.inputTokens + b.inputTokens,
    outputTokens: a.outputTokens + b.outputTokens,
    cachedTokens: a.cachedTokens + b.cachedTokens,
    ...(writes > 0 ? { cacheWriteTokens: writes } : {}),
    costUsd: a.costUsd + b.costUsd,
    modelCalls: a.modelCalls + b.modelCalls,
  };
};
