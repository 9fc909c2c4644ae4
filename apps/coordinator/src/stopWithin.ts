import { errorMessage } from '@troupe/protocol';
import { type Logger, withTimeout } from '@troupe/runtime';

/**
 * How long a stop of `troupe up` or `troupe worker` takes at most unless told otherwise: well inside the 30 s a
 * Kubernetes pod is given by default (`terminationGracePeriodSeconds`), with room for the process to exit.
 */
export const DEFAULT_STOP_TIMEOUT_MS = 20_000;

/** How a part of a stop ended: done, failed (and logged), or still going when its time was up. */
export type StopOutcome = 'stopped' | 'failed' | 'timeout';

/**
 * Runs one part of a stop (handing tasks back, draining the connection) for at most `ms`, and never throws: a
 * failure is logged, and a part still going when its time is up is left to finish in the background, if ever.
 *
 * @example
 * if ((await stopWithin('the coordinator', () => coordinator.stop(), 10_000, logger)) === 'timeout') closeNow();
 */
export async function stopWithin(
  what: string,
  work: () => Promise<void>,
  ms: number,
  logger: Logger,
): Promise<StopOutcome> {
  const outcome = work().then(
    () => 'stopped' as const,
    (error: unknown) => {
      logger.warn({ err: error }, `stopping ${what} failed: ${errorMessage(error)}; going on with the stop`);
      return 'failed' as const;
    },
  );
  return withTimeout(outcome, Math.max(0, ms));
}
