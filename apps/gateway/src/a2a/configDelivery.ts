import { setTimeout as delay } from 'node:timers/promises';
import { StreamResponse, TaskPushNotificationConfig } from '@a2a-js/sdk';
import { followTaskEvents } from '@troupe/client';
import {
  FINAL_EVENT_KINDS,
  type PushCursor,
  type StoredPushConfig,
  type TroupeEvent,
} from '@troupe/protocol';
import type { JetStreamBus, KeyValue, KvEntry, Logger } from '@troupe/runtime';
import { pushConfigKey } from './pushConfigs.ts';
import { checkPushUrl, type PushUrlPolicy } from './pushUrls.ts';
import { TaskFold } from './taskMapping.ts';
import { postWebhook, WebhookFailed } from './webhookPost.ts';

/** How a config's failed deliveries are tried again: backing off from `firstMs` to `maxMs`, given up after `giveUpAfterMs`. */
export interface PushRetry {
  /** The wait after the first failure (1 s); it doubles with each failure after. */
  firstMs: number;
  /** The longest wait between two tries (5 min). */
  maxMs: number;
  /** How long a receiver may fail without a break before its config is given up on (24 h). */
  giveUpAfterMs: number;
}

export const DEFAULT_PUSH_RETRY: PushRetry = {
  firstMs: 1_000,
  maxMs: 5 * 60_000,
  giveUpAfterMs: 24 * 60 * 60_000,
};

/** The A2A updates a Troupe event makes, for a fold that has seen the task's earlier events. */
export type PushRenderer = (fold: TaskFold, event: TroupeEvent) => StreamResponse[];

export interface ConfigDeliveryOptions {
  bus: JetStreamBus;
  logger: Logger;
  store: KeyValue<StoredPushConfig>;
  urlPolicy: PushUrlPolicy;
  retry: PushRetry;
  /** One POST's time limit, in ms. */
  timeoutMs: number;
  /** How a Troupe event becomes webhook bodies (the A2A server's own mapping by default). */
  render?: PushRenderer;
  now?: () => number;
}

/** How one config's delivery ended, for the queue: `over` acks its job, `handBack` gives it to another gateway. */
export type DeliveryEnd = 'over' | 'handBack' | 'lost';

/**
 * Delivers one push config's bodies, in order, at least once: it folds the task's events from its first (the A2A
 * task is rebuilt from them, as the A2A server does) and POSTs the updates of those past the config's cursor, moving
 * the cursor in the config's record after each POST answered 2xx. A failed POST ends the pass; the next pass, after
 * a backoff, starts again from the cursor. The run ends when the task's final state has been delivered (`over`), the
 * config is deleted (`over`), it has failed for longer than {@link PushRetry.giveUpAfterMs} (`over`, given up, logged
 * at error and kept in the record as `dropped`), another gateway took it (`lost`), or `signal` aborts (`handBack`).
 */
export class ConfigDelivery {
  readonly #options: ConfigDeliveryOptions;
  readonly #key: string;
  readonly #taskId: string;
  readonly #configId: string;
  readonly #render: PushRenderer;
  readonly #now: () => number;

  constructor(taskId: string, configId: string, options: ConfigDeliveryOptions) {
    this.#options = options;
    this.#taskId = taskId;
    this.#configId = configId;
    this.#key = pushConfigKey(taskId, configId);
    this.#render = options.render ?? ((fold, event) => fold.apply(event));
    this.#now = options.now ?? Date.now;
  }

  async run(signal: AbortSignal): Promise<DeliveryEnd> {
    const log = this.#options.logger.child({ taskId: this.#taskId, pushConfig: this.#configId });
    for (;;) {
      if (signal.aborted) return 'handBack';
      const entry = await this.#options.store.get(this.#key);
      if (entry?.value.delivery.state !== 'active') return 'over';
      const pass = await this.#pass(entry, signal);
      if (pass.done)
        log.info('push deliveries of this config are done: its task ended and all was delivered');
      if (pass.end) return pass.end;
      if (signal.aborted) return 'handBack';
      const failure = pass.failure ?? new WebhookFailed('the delivery pass ended without an answer');
      const wait = await this.#failed(pass.entry, failure, log);
      if (wait === undefined) return 'over';
      if (!(await sleep(wait, signal))) return 'handBack';
    }
  }

  /** One pass over the task's events, from its first, delivering what comes after the cursor. */
  async #pass(
    start: KvEntry<StoredPushConfig>,
    signal: AbortSignal,
  ): Promise<{ end?: DeliveryEnd; done?: boolean; failure?: Error; entry: KvEntry<StoredPushConfig> }> {
    let entry = start;
    let fold: TaskFold | undefined;
    let failure: Error | undefined;
    let gone: DeliveryEnd | undefined;
    let ended = false;
    /** The sequence of the events read last, and how many updates the events before this one at it had. */
    let sharedSeq = -1;
    let before = 0;
    const stop = new AbortController();
    const onAbort = () => stop.abort();
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      await followTaskEvents(
        this.#options.bus,
        { taskId: entry.value.taskId, pipeline: entry.value.pipeline },
        {
          signal: stop.signal,
          onEvent: async ({ seq, event }) => {
            fold ??= new TaskFold({ taskId: this.#taskId, contextId: contextOf(entry.value, event) });
            const updates = this.#render(fold, event);
            // Several events share a sequence (a batch's, see SequencedEvent): a cursor's part counts the updates of
            // all of them, in the order they are read, which is the same in every pass.
            if (seq !== sharedSeq) {
              sharedSeq = seq;
              before = 0;
            }
            const first = before;
            before += updates.length;
            const { cursor } = entry.value.delivery;
            if (seq < cursor.seq) return;
            const from = seq === cursor.seq ? Math.max(0, cursor.part - first) : 0;
            for (let index = from; index < updates.length; index++) {
              const update = updates[index] as StreamResponse;
              const part = first + index;
              // Read again before each POST: a config deleted (or taken over) while its task was quiet gets nothing more.
              const fresh = await this.#options.store.get(this.#key);
              if (!fresh || !sameCursor(fresh.value.delivery.cursor, entry.value.delivery.cursor)) {
                gone = fresh ? 'lost' : 'over';
                stop.abort();
                return;
              }
              entry = fresh;
              try {
                await this.#post(entry.value, update, stop.signal);
              } catch (error) {
                failure = error as Error;
                stop.abort();
                return;
              }
              const moved = await this.#advance(entry, { seq, part: part + 1 });
              if (moved === 'deleted' || moved === 'lost') {
                gone = moved === 'deleted' ? 'over' : 'lost';
                stop.abort();
                return;
              }
              entry = moved;
            }
            if (FINAL_EVENT_KINDS.includes(event.kind)) ended = true;
          },
        },
      );
    } catch (error) {
      // A failure to read the events (NATS gone a while) is tried again like a receiver's.
      failure ??= error as Error;
    } finally {
      signal.removeEventListener('abort', onAbort);
    }
    if (gone) return { end: gone, entry };
    if (signal.aborted) return { end: 'handBack', entry };
    if (failure) return { failure, entry };
    if (ended) {
      const finished = await this.#finish(entry, 'done');
      return finished === 'lost' ? { end: 'lost', entry } : { end: 'over', done: true, entry };
    }
    return { failure: new Error('the task events ended before its final event'), entry };
  }

  /** POSTs one body to the config's URL, as the A2A spec says: the StreamResponse JSON, with the config's credentials. */
  async #post(stored: StoredPushConfig, update: StreamResponse, signal: AbortSignal): Promise<void> {
    const config = TaskPushNotificationConfig.fromJSON(stored.config);
    const url = checkPushUrl(config.url, this.#options.urlPolicy);
    const headers: Record<string, string> = { 'content-type': 'application/a2a+json' };
    if (config.authentication?.scheme && config.authentication.credentials) {
      headers.authorization = `${config.authentication.scheme} ${config.authentication.credentials}`;
    }
    if (config.token) headers['x-a2a-notification-token'] = config.token;
    const body = JSON.stringify(StreamResponse.toJSON(update));
    await postWebhook(url, body, {
      headers,
      timeoutMs: this.#options.timeoutMs,
      policy: this.#options.urlPolicy,
      signal,
    });
  }

  /** Moves the cursor after a delivered body; `deleted` when the config is gone, `lost` when another gateway moved it. */
  async #advance(
    entry: KvEntry<StoredPushConfig>,
    cursor: PushCursor,
  ): Promise<KvEntry<StoredPushConfig> | 'deleted' | 'lost'> {
    let current = entry;
    for (;;) {
      const { delivery } = current.value;
      const value: StoredPushConfig = {
        ...current.value,
        delivery: { ...delivery, cursor, delivered: delivery.delivered + 1, attempts: 0 },
      };
      delete value.delivery.failingSince;
      delete value.delivery.lastError;
      const revision = await this.#options.store.update(this.#key, value, current.revision);
      if (revision !== undefined) return { key: this.#key, value, revision };
      const fresh = await this.#options.store.get(this.#key);
      if (!fresh) return 'deleted';
      // A replaced URL or credentials (a create with this config's id) keep the cursor: write again on top of it.
      if (!sameCursor(fresh.value.delivery.cursor, entry.value.delivery.cursor)) return 'lost';
      current = fresh;
    }
  }

  /** Records a failed try; the wait before the next, or undefined when the config is given up on. */
  async #failed(entry: KvEntry<StoredPushConfig>, failure: Error, log: Logger): Promise<number | undefined> {
    const { retry } = this.#options;
    const now = this.#now();
    const attempts = entry.value.delivery.attempts + 1;
    const failingSince = entry.value.delivery.failingSince ?? new Date(now).toISOString();
    const failingMs = now - Date.parse(failingSince);
    const host = hostOf(entry.value);
    if (failingMs >= retry.giveUpAfterMs) {
      log.error(
        { url: host, attempts, failingSince, err: failure },
        `gave up on push config ${this.#configId} of task ${this.#taskId}: its webhook at ${host} failed for ${Math.round(failingMs / 1000)} s (${failure.message}); nothing more is sent to it`,
      );
      await this.#finish(entry, 'dropped', failure.message, { attempts, failingSince });
      return undefined;
    }
    const delivery = { ...entry.value.delivery, attempts, failingSince, lastError: failure.message };
    await this.#options.store
      .update(this.#key, { ...entry.value, delivery }, entry.revision)
      .catch((error: unknown) => log.warn({ err: error }, 'cannot record a failed push delivery'));
    if (attempts === 1 || attempts % 10 === 0) {
      log.warn(
        { url: host, attempts, failingSince, err: failure },
        `push delivery to ${host} failed (${failure.message}); trying again with backoff`,
      );
    }
    const wait = Math.min(retry.firstMs * 2 ** Math.min(attempts - 1, 30), retry.maxMs);
    // Jitter, so receivers that come back are not met by every config at once.
    return Math.round(wait * (0.8 + Math.random() * 0.4));
  }

  async #finish(
    entry: KvEntry<StoredPushConfig>,
    state: 'done' | 'dropped',
    lastError?: string,
    extra: { attempts?: number; failingSince?: string } = {},
  ): Promise<'ok' | 'lost'> {
    let current = entry;
    for (;;) {
      const delivery = {
        ...current.value.delivery,
        ...extra,
        state,
        endedAt: new Date(this.#now()).toISOString(),
        ...(lastError === undefined ? {} : { lastError }),
      };
      if (
        (await this.#options.store.update(this.#key, { ...current.value, delivery }, current.revision)) !==
        undefined
      )
        return 'ok';
      const fresh = await this.#options.store.get(this.#key);
      if (!fresh || !sameCursor(fresh.value.delivery.cursor, entry.value.delivery.cursor)) return 'lost';
      current = fresh;
    }
  }
}

const sameCursor = (a: PushCursor, b: PushCursor) => a.seq === b.seq && a.part === b.part;

/** The A2A context of the task: as the config was made with, else as the task was submitted with. */
function contextOf(stored: StoredPushConfig, event: TroupeEvent): string {
  if (stored.contextId) return stored.contextId;
  const metadata = event.kind === 'task.accepted' ? event.data.metadata : undefined;
  return metadata?.a2aContextId ?? '';
}

/** The webhook's origin, for logs: never its path or query, which may hold a secret. */
function hostOf(stored: StoredPushConfig): string {
  try {
    return new URL(TaskPushNotificationConfig.fromJSON(stored.config).url).origin;
  } catch {
    return '(an invalid url)';
  }
}

/** Waits `ms`; false when `signal` aborted first. */
const sleep = (ms: number, signal: AbortSignal): Promise<boolean> =>
  delay(ms, undefined, { signal }).then(
    () => true,
    () => false,
  );
