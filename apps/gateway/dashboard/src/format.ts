/** Numbers as the dashboard shows them, as the CLI does. */

/**
 * A duration as a person reads it: `840 ms`, `4.2 s`, `42 s`, `4 min 5 s`, `2 h 3 min`, `3 d 4 h` (as `troupe trace`
 * writes it, with milliseconds under a second). It rounds to the unit it shows before it splits, so 299.6 s reads
 * `5 min 0 s`, never `4 min 60 s`.
 */
export const duration = (ms: number): string => {
  const safe = Math.max(0, ms);
  if (Math.round(safe) < 1_000) return `${Math.round(safe)} ms`;
  const tenths = Math.round(safe / 100);
  if (tenths < 100) return `${(tenths / 10).toFixed(1)} s`;
  const seconds = Math.round(safe / 1_000);
  if (seconds < 60) return `${seconds} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min ${seconds % 60} s`;
  const totalMinutes = Math.round(safe / 60_000);
  const hours = Math.floor(totalMinutes / 60);
  if (hours < 24) return `${hours} h ${totalMinutes % 60} min`;
  const totalHours = Math.round(safe / 3_600_000);
  return `${Math.floor(totalHours / 24)} d ${totalHours % 24} h`;
};

/** `1 approval`, `2 approvals`, `0 tool calls`: a count with its noun, plural unless it is one. */
export const count = (n: number, noun: string, plural = `${noun}s`): string =>
  `${n} ${n === 1 ? noun : plural}`;

/** Tokens in→out with the prompt cache's reads and writes apart: `1200→80 tok (900 cache read, 250 cache write)`. */
export const tokens = (u: {
  inputTokens: number;
  outputTokens: number;
  cachedTokens?: number;
  cacheWriteTokens?: number;
}): string => {
  const cache = [
    ...(u.cachedTokens ? [`${u.cachedTokens} cache read`] : []),
    ...(u.cacheWriteTokens ? [`${u.cacheWriteTokens} cache write`] : []),
  ];
  return `${u.inputTokens}→${u.outputTokens} tok${cache.length > 0 ? ` (${cache.join(', ')})` : ''}`;
};

export const cost = (usd: number): string => `$${usd.toFixed(4)}`;

/** How long ago, or how long since `from` until `to`. */
export const since = (from: string, to: number = Date.now()): string =>
  duration(Math.max(0, to - Date.parse(from)));
