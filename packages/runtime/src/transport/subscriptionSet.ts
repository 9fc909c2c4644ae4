import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import type { Logger } from '../logging/logger.ts';
import { withTimeout } from '../withTimeout.ts';
import type { BusSubscription } from './bus.ts';

interface TrackedSubscription {
  sub: Subscription;
  settled: () => Promise<void>;
}

/**
 * A bus's subscriptions and the handler work each has started, so that a drain can stop taking messages and wait
 * for what is running before the connection closes.
 */
export class SubscriptionSet {
  readonly #connection: NatsConnection;
  readonly #logger: Logger;
  readonly #subscriptions = new Set<TrackedSubscription>();

  constructor(connection: NatsConnection, logger: Logger) {
    this.#connection = connection;
    this.#logger = logger;
  }

  /**
   * Subscribes to `subject` (in `queue`, when given), handing each message to `onMessage`; the work it returns is
   * waited for by the subscription's `closed` and by {@link drain}. A subscription error is logged; it ends nothing.
   */
  add(
    subject: string,
    queue: string | undefined,
    onMessage: (msg: Msg) => Promise<void> | undefined,
  ): BusSubscription {
    const inflight = new Set<Promise<void>>();
    const track = (work: Promise<void>): void => {
      inflight.add(work);
      void work.finally(() => inflight.delete(work));
    };
    const sub = this.#connection.subscribe(subject, {
      ...(queue === undefined ? {} : { queue }),
      callback: (error, msg) => {
        if (error) {
          this.#logger.error({ err: error, subject }, `subscription to ${subject} failed: ${error.message}`);
          return;
        }
        const work = onMessage(msg);
        if (work) track(work);
      },
    });
    const settled = async (): Promise<void> => {
      await sub.closed;
      while (inflight.size > 0) await Promise.allSettled([...inflight]);
    };
    const tracked: TrackedSubscription = { sub, settled };
    this.#subscriptions.add(tracked);
    const closed = settled().finally(() => this.#subscriptions.delete(tracked));
    return {
      unsubscribe: () => {
        if (!sub.isClosed()) sub.unsubscribe();
      },
      closed,
    };
  }

  /**
   * Stops every subscription (drained through the server while `reachable`, as that is a round trip a lost
   * connection never completes) and waits for their handlers, all within `left()` ms; past it, says so and returns.
   */
  async drain(reachable: boolean, left: () => number, timeoutMs: number): Promise<void> {
    const subscriptions = [...this.#subscriptions];
    if (reachable) {
      await withTimeout(Promise.allSettled(subscriptions.map(({ sub }) => sub.drain())), left());
    }
    for (const { sub } of subscriptions) if (!sub.isClosed()) sub.unsubscribe();
    const handlersDone = Promise.allSettled(subscriptions.map(({ settled }) => settled()));
    if ((await withTimeout(handlersDone, left())) === 'timeout') {
      this.#logger.warn(
        { timeoutMs },
        'handlers still running at the end of the drain; closing the connection anyway',
      );
    }
  }
}
