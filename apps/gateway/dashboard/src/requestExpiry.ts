import { duration } from './format.ts';

/** What a request card needs of a request's record to say when it runs out. */
export interface ExpiryOf {
  expiresAt: string;
  /** Its task is paused: the request does not run out, and has `leftMs` from the resume (its record's `held`). */
  held?: { since: string; leftMs: number };
}

/**
 * When a waiting approval or question runs out, as its card says it. A request held while its task is paused has an
 * `expiresAt` from before the pause that no longer counts (its asker sets a new one at the resume), so it says so and
 * how long it will have, rather than counting down to a time that has passed.
 */
export function expiryText(request: ExpiryOf, now: number = Date.now()): string {
  if (request.held)
    return `held while the task is paused; ${duration(request.held.leftMs)} left when resumed`;
  return `expires in ${duration(Date.parse(request.expiresAt) - now)}`;
}
