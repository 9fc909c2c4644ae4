const UNIT_MS: Readonly<Record<string, number>> = {
  ms: 1,
  s: 1_000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};

const WHOLE = /^(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+$/;
const PART = /(\d+(?:\.\d+)?)(ms|s|m|h|d)/g;

/**
 * Milliseconds of a duration such as `30s`, `5m`, `2h`, `1d`, `1h30m` or `1.5h`; undefined for anything else,
 * zero included.
 *
 * @example
 * parseDuration('1h30m'); // 5_400_000
 */
export function parseDuration(text: string): number | undefined {
  const compact = text.trim().toLowerCase();
  if (!WHOLE.test(compact)) return undefined;
  let ms = 0;
  for (const [, amount, unit] of compact.matchAll(PART)) ms += Number(amount) * (UNIT_MS[unit ?? ''] ?? 0);
  return ms > 0 ? Math.round(ms) : undefined;
}

/**
 * A duration as a person reads it: `0.4 s`, `12 s`, `4 min 5 s`, `2 h 3 min`, `3 d 4 h`. Tenths of a second
 * under 10 s, so a quick task does not read `0 s`.
 */
export function formatDuration(ms: number): string {
  const safe = Math.max(0, ms);
  if (Math.round(safe / 100) < 100) return `${(safe / 1000).toFixed(1)} s`;
  const seconds = Math.round(safe / 1000);
  if (seconds < 60) return `${seconds} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min ${seconds % 60} s`;
  const hours = Math.floor(minutes / 60);
  if (hours < 24) return `${hours} h ${minutes % 60} min`;
  return `${Math.floor(hours / 24)} d ${hours % 24} h`;
}
