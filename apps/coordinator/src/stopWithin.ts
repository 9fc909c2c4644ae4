import { errorMessage } from '@troupe/protocol';
import { type JetStreamBus, type Logger, withTimeout } from '@troupe/runtime';

/**
 * How long a stop of `troupe up` or `troupe worker` takes at most unless told otherwise: well inside the 30 s a
 * Kubernetes pod is given by default (`terminationGracePeriodSeconds`), with room for the process to exit.
 */
export const DEFAULT_STOP_TIMEOUT_MS = 20_000;

/**
 * How long a stop waits for a NATS server it has lost before it leaves what it could not hand back to redelivery:
 * long enough for a server that restarts, short next to the ack wait that brings the tasks back.
 */
export const STOP_OUTAGE_WAIT_MS = 5_000;

/** How a part of a stop ended: done, failed (and logged), still going when its time was up, or NATS stayed away. */
export type StopOutcome = 'stopped' | 'failed' | 'timeout' | 'unreachable';

/**
 * Runs one part of a stop (handing tasks back, draining the connection) for at most `ms`, and never throws: a
 * failure is logged, and a part still going when its time is up, or once `bus` has been unreachable for
 * {@link STOP_OUTAGE_WAIT_MS} in a row, is left to finish in the background, if ever.
 *
 * @example
 * if ((await stopWithin('the coordinator', () => coordinator.stop(), 10_000, { logger, bus })) !== 'stopped') …
 */
export async function stopWithin(
  what: string,
  work: () => Promise<void>,
  ms: number,
  context: { logger: Logger; bus?: WatchedBus },
): Promise<StopOutcome> {
  const outcome = work().then(
    () => 'stopped' as const,
    (error: unknown) => {
      context.logger.warn(
        { err: error },
        `stopping ${what} failed: ${errorMessage(error)}; going on with the stop`,
      );
      return 'failed' as const;
    },
  );
  const outage = context.bus ? unreachableFor(context.bus, STOP_OUTAGE_WAIT_MS) : undefined;
  try {
    const lost = outage?.elapsed.then(() => 'unreachable' as const);
    return await withTimeout(lost ? Promise.race([outcome, lost]) : outcome, Math.max(0, ms));
  } finally {
    outage?.cancel();
  }
}

/** What a stop watches of its connection: whether it is up, and its changes. */
type WatchedBus = Pick<JetStreamBus, 'reachable' | 'onStatus'>;

/** Resolves once `bus` has been unreachable for `ms` in a row; `cancel` stops watching. */
function unreachableFor(bus: WatchedBus, ms: number): { elapsed: Promise<void>; cancel(): void } {
  let timer: NodeJS.Timeout | undefined;
  let elapse: () => void = () => {};
  const elapsed = new Promise<void>((resolve) => (elapse = resolve));
  const check = (): void => {
    if (bus.reachable) {
      clearTimeout(timer);
      timer = undefined;
    } else if (timer === undefined) {
      timer = setTimeout(elapse, ms);
    }
  };
  const unlisten = bus.onStatus(check);
  check();
  return {
    elapsed,
    cancel: () => {
      unlisten();
      clearTimeout(timer);
    },
  };
}
