/** The cache counts of a usage: reads, and writes where the provider reports them. */
type CacheUsage = { cachedTokens: number; cacheWriteTokens?: number | undefined };

/**
 * The prompt cache's share of a prompt, as `troupe trace` and `troupe runs` write it after the tokens: reads and
 * writes apart, since a write costs more than plain input where a read costs less — ` (900 cache read, 250 cache
 * write)`, ` (900 cache read)`, or nothing when the cache was not used.
 */
export function cacheTokens(usage: CacheUsage): string {
  const parts = [
    ...(usage.cachedTokens > 0 ? [`${usage.cachedTokens} cache read`] : []),
    ...(usage.cacheWriteTokens ? [`${usage.cacheWriteTokens} cache write`] : []),
  ];
  return parts.length > 0 ? ` (${parts.join(', ')})` : '';
}

/**
 * A model call's (or a step's, a task's) tokens as the event and trace lines write them: input→output, then the
 * cache's share — `1200→80 tok (900 cache read, 250 cache write)`.
 */
export function tokenCounts(usage: CacheUsage & { inputTokens: number; outputTokens: number }): string {
  return `${usage.inputTokens}→${usage.outputTokens} tok${cacheTokens(usage)}`;
}
