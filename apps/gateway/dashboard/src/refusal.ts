import { ApiError } from './client.ts';

/**
 * What each refusal of the gateway means for the person at the page, beside the gateway's own message: the status
 * says whether to change the token, wait, or leave it (docs/gateway.md, "Errors").
 */
const MEANING: Record<number, string> = {
  401: 'the token is not accepted: sign in again',
  403: 'this token’s scopes do not allow it',
  404: 'the gateway knows no such task',
  409: 'the task’s state does not allow it now',
  503: 'nobody runs the task at the moment: try again later',
};

/**
 * A refused request in one plain sentence: what was not done, the gateway's message, and what its status means
 * (`Pause refused (409): task t-1 is paused already — the task’s state does not allow it now`). A failure that never
 * reached the gateway says so.
 */
export function refusalText(what: string, error: unknown): string {
  if (error instanceof ApiError) {
    const meaning = MEANING[error.status];
    return `${what} refused (${error.status}): ${error.message}${meaning ? ` — ${meaning}` : ''}`;
  }
  const message = error instanceof Error ? error.message : String(error);
  return `${what} failed: the gateway did not answer (${message})`;
}

/** Whether a refusal was on the ground of the token, so what the token may do is worth reading again. */
export const refusedForToken = (error: unknown): boolean =>
  error instanceof ApiError && (error.status === 401 || error.status === 403);
