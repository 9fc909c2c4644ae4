import { randomBytes } from 'node:crypto';

/** Time, injected so machines and hosts are tested with a controlled clock. */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

/** A new W3C trace context (`00-<trace id>-<span id>-01`) for a task. */
export function newTraceparent(): string {
  return `00-${randomBytes(16).toString('hex')}-${randomBytes(8).toString('hex')}-01`;
}
