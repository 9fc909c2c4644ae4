import { setTimeout as delay } from 'node:timers/promises';
import { errorMessage, type StoredPushConfig } from '@troupe/protocol';
import { type JetStreamBus, type KeyValue, type Logger, type WorkItem, WorkQueue } from '@troupe/runtime';
import {
  ConfigDelivery,
  DEFAULT_PUSH_RETRY,
  type DeliveryEnd,
  type PushRenderer,
  type PushRetry,
} from './configDelivery.ts';
import { openPushBucket, pushConfigKey } from './pushConfigs.ts';
import { DEFAULT_PUSH_ACK_WAIT_MS, ensurePushQueue, pushJobOf, pushQueue } from './pushJobs.ts';
import type { PushUrlPolicy } from './pushUrls.ts';
import { DEFAULT_WEBHOOK_TIMEOUT_MS } from './webhookPost.ts';

/** What a gateway's operator may set of A2A push notifications. */
export interface PushSettings {
  /** Where webhooks may go; private, loopback and link-local addresses are refused unless allowed. */
  urlPolicy?: PushUrlPolicy;
  /** How failed deliveries are tried again, and when a receiver is given up on (1 s doubling to 5 min; 24 h). */
  retry?: Partial<PushRetry>;
  /** One POST's time limit, in ms (15 s). */
  timeoutMs?: number;
  /**
   * How long a gateway may hold a config without a sign of life before another gateway takes it over, in ms (30 s):
   * how soon a crashed gateway's webhooks resume elsewhere. The last gateway started sets it for all.
   */
  ackWaitMs?: number;
  /** The most configs this gateway delivers at once (256); more wait in the queue for a free slot here or elsewhere. */
  concurrency?: number;
}

export interface PushDeliveryOptions extends PushSettings {
  bus: JetStreamBus;
  logger: Logger;
  /** How a Troupe event becomes webhook bodies: the A2A server's own mapping unless a test says otherwise. */
  render?: PushRenderer;
}

/** How long to wait before trying again after NATS refused or failed a queue operation. */
const RETRY_SETUP_MS = 2_000;
/** How long one pull waits for a job before it asks again. */
const PULL_EXPIRES_MS = 2_000;

/**
 * The worker every gateway runs that sends A2A push notifications: it takes push configs from the queue all
 * gateways share (`A2A_PUSH`, one message per config, see pushJobs.ts) and delivers each with a
 * {@link ConfigDelivery}: every A2A state change of the task, in order, at least once, from the config's cursor in
 * the bucket `a2a-push` — so neither a gateway's nor a coordinator's restart loses or reorders one. While it holds a
 * config it tells the server it is alive; on {@link stop} it hands its configs back at once; if it dies, another
 * gateway takes them over when the ack wait runs out.
 */
export class PushDelivery {
  readonly #options: PushDeliveryOptions;
  readonly #logger: Logger;
  readonly #retry: PushRetry;
  readonly #ackWaitMs: number;
  readonly #concurrency: number;
  readonly #stopped = new AbortController();
  readonly #active = new Map<string, { stop: AbortController; done: Promise<void> }>();
  #loop: Promise<void> | undefined;
  #freed: (() => void) | undefined;
  /** The queue being taken from, whose pull under way a stop ends. */
  #queue: WorkQueue | undefined;

  constructor(options: PushDeliveryOptions) {
    this.#options = options;
    this.#logger = options.logger.child({ component: 'a2a-push' });
    this.#retry = { ...DEFAULT_PUSH_RETRY, ...options.retry };
    this.#ackWaitMs = options.ackWaitMs ?? DEFAULT_PUSH_ACK_WAIT_MS;
    this.#concurrency = options.concurrency ?? 256;
  }

  /** Starts taking configs; set-up trouble (NATS away, the bucket not made yet) is logged and tried again. */
  start(): void {
    this.#loop ??= this.#run().catch((error: unknown) =>
      this.#logger.error({ err: error }, 'the push delivery worker stopped'),
    );
  }

  /** Stops: a POST under way is cut off, and each config held is handed back to the queue for another gateway. */
  async stop(): Promise<void> {
    this.#stopped.abort();
    this.#freed?.();
    this.#queue?.stop();
    for (const { stop } of this.#active.values()) stop.abort();
    await Promise.all([...this.#active.values()].map(({ done }) => done));
    await this.#loop;
  }

  /** How many configs this gateway is delivering now. */
  get active(): number {
    return this.#active.size;
  }

  /**
   * Sets the queue up, then takes configs from it; any failure of NATS (an outage, a stream or consumer deleted under
   * it) is logged once per run of failures and the whole is tried again, set-up included, until {@link stop}.
   */
  async #run(): Promise<void> {
    const signal = this.#stopped.signal;
    let failing = false;
    while (!signal.aborted) {
      try {
        await ensurePushQueue(this.#options.bus, this.#ackWaitMs);
        const store = await openPushBucket(this.#options.bus);
        this.#queue = await WorkQueue.open(this.#options.bus, pushQueue(this.#ackWaitMs));
        if (failing) this.#logger.info('A2A push notifications are set up again');
        failing = false;
        await this.#pull(this.#queue, store, signal);
      } catch (error) {
        if (!failing) {
          this.#logger.warn(
            { err: error },
            `A2A push notifications wait: cannot use their queue or bucket (${errorMessage(error)}); trying again`,
          );
        }
        failing = true;
        await delay(RETRY_SETUP_MS, undefined, { signal }).catch(() => undefined);
      }
    }
  }

  /** Takes configs while this gateway has room for them, until `signal` aborts or NATS fails. */
  async #pull(queue: WorkQueue, store: KeyValue<StoredPushConfig>, signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      if (this.#active.size >= this.#concurrency) {
        await new Promise<void>((resolve) => {
          this.#freed = resolve;
        });
        continue;
      }
      const job = await queue.take(PULL_EXPIRES_MS);
      if (!job) continue;
      if (signal.aborted) {
        settle(job, 'handBack');
        return;
      }
      this.#take(job, store);
    }
  }

  /** Delivers one config, keeping its queue message alive meanwhile, and settles the message by how it ended. */
  #take(msg: WorkItem, store: KeyValue<StoredPushConfig>): void {
    const job = pushJobOf(msg.subject);
    if (!job) {
      this.#logger.warn({ subject: msg.subject }, 'dropping a push job on a subject that names no config');
      msg.drop();
      return;
    }
    const key = pushConfigKey(job.taskId, job.configId);
    // Redelivered while this gateway still holds it (a late sign of life): the holder goes on.
    if (this.#active.has(key)) return;
    const stop = new AbortController();
    // A failed sign of life means the connection is gone: the run ends on its next NATS call.
    const alive = setInterval(() => msg.working(), Math.max(100, Math.floor(this.#ackWaitMs / 3)));
    const delivery = new ConfigDelivery(job.taskId, job.configId, {
      bus: this.#options.bus,
      logger: this.#logger,
      store,
      urlPolicy: this.#options.urlPolicy ?? {},
      retry: this.#retry,
      timeoutMs: this.#options.timeoutMs ?? DEFAULT_WEBHOOK_TIMEOUT_MS,
      ...(this.#options.render ? { render: this.#options.render } : {}),
    });
    const done = delivery
      .run(stop.signal)
      .then((end: DeliveryEnd) => settle(msg, end))
      .catch((error: unknown) => {
        this.#logger.error(
          { err: error, taskId: job.taskId, pushConfig: job.configId },
          'push delivery failed; the config goes back to the queue',
        );
        settle(msg, 'handBack', RETRY_SETUP_MS);
      })
      .finally(() => {
        clearInterval(alive);
        this.#active.delete(key);
        this.#freed?.();
        this.#freed = undefined;
      });
    this.#active.set(key, { stop, done });
  }
}

/** `over`: the job is done; `handBack`: another gateway may take it now; `lost`: another gateway has it already. */
function settle(item: WorkItem, end: DeliveryEnd, delayMs?: number): void {
  if (end === 'over') item.done();
  else if (end === 'handBack') item.handBack(delayMs);
}
