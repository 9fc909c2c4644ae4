/**
 * The prompt cache's share of a prompt, as `troupe trace` and `troupe runs` write it after the tokens: reads and
 * writes apart, since a write costs more than plain input where a read costs less — ` (900 cache read, 250 cache
 * write)`, ` (900 cache read)`, or nothing when the cache was not used.
 */
export function cacheTokens(usage: { cachedTokens: number; cacheWriteTokens?: number | undefined }): string {
  const parts = [
    ...(usage.cachedTokens > 0 ? [`${usage.cachedTokens} cache read`] : []),
    ...(usage.cacheWriteTokens ? [`${usage.cacheWriteTokens} cache write`] : []),
  ];
  return parts.length > 0 ? ` (${parts.join(', ')})` : '';
}
