/** How long an MCP server that went away is left alone before each attempt to bring it back. */
export interface RestartBackoff {
  /** The wait before the first attempt; it doubles with each attempt after. */
  initialDelayMs: number;
  /** The longest wait between two attempts. */
  maxDelayMs: number;
  /** A server that stayed up this long counts as healthy again: after its next failure, the waits start over. */
  stableAfterMs: number;
}

/** 1 s, 2 s, 4 s … up to 30 s; a server up for a minute starts over at 1 s. */
export const DEFAULT_RESTART_BACKOFF: RestartBackoff = {
  initialDelayMs: 1_000,
  maxDelayMs: 30_000,
  stableAfterMs: 60_000,
};

/**
 * The wait before attempt `attempt` (from 1): the initial delay doubled for each attempt before it, capped at the
 * maximum, then shortened at random by up to a fifth, so the copies of one server that many workers run, which
 * often die together, are not restarted in lockstep. It never exceeds the cap.
 *
 * @example
 * restartDelayMs(3, DEFAULT_RESTART_BACKOFF, () => 0); // 4000
 * restartDelayMs(9, DEFAULT_RESTART_BACKOFF, () => 0); // 30000
 */
export function restartDelayMs(
  attempt: number,
  backoff: RestartBackoff,
  random: () => number = Math.random,
): number {
  const doublings = Math.min(Math.max(attempt - 1, 0), 30);
  const nominal = Math.min(backoff.maxDelayMs, backoff.initialDelayMs * 2 ** doublings);
  return Math.round(nominal * (1 - 0.2 * random()));
}
