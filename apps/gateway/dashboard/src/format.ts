/** Numbers as the dashboard shows them, as the CLI does. */

export const duration = (ms: number): string =>
  ms < 1_000
    ? `${Math.round(ms)} ms`
    : ms < 60_000
      ? `${(ms / 1_000).toFixed(1)} s`
      : `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1_000)} s`;

export const tokens = (u: { inputTokens: number; outputTokens: number; cachedTokens?: number }): string =>
  `${u.inputTokens}→${u.outputTokens} tok${u.cachedTokens ? ` (${u.cachedTokens} cached)` : ''}`;

export const cost = (usd: number): string => `$${usd.toFixed(4)}`;

/** How long ago, or how long since `from` until `to`. */
export const since = (from: string, to: number = Date.now()): string =>
  duration(Math.max(0, to - Date.parse(from)));
