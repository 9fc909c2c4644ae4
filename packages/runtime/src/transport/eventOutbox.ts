import {
  JetStreamApiCodes,
  JetStreamApiError,
  type JetStreamClient,
  type JetStreamManager,
  jetstream,
  jetstreamManager,
} from '@nats-io/jetstream';
import {
  ClosedConnectionError,
  headers as createHeaders,
  DrainingConnectionError,
  InvalidArgumentError,
  type MsgHdrs,
  type NatsConnection,
  TimeoutError,
} from '@nats-io/transport-node';
import { STREAMS } from '@troupe/protocol';
import type { Logger } from '../logging/logger.ts';

export interface EventOutboxOptions {
  connection: NatsConnection;
  logger: Logger;
  /** Events kept until stored; past it the oldest are dropped, with an error logged. Default 10,000. */
  maxPending?: number;
  /** How long one attempt waits for JetStream's acknowledgement; default 5 s. */
  ackTimeoutMs?: number;
  /** Pause after the first failed attempt; it doubles with each failure in a row, up to `maxRetryDelayMs`. Default 100 ms. */
  retryDelayMs?: number;
  /** Default 5 s. */
  maxRetryDelayMs?: number;
}

/** An event to publish: its subject, JSON payload, id (its `Nats-Msg-Id`) and extra headers. */
export interface OutgoingEvent {
  id: string;
  subject: string;
  data: string;
  headers: Record<string, string>;
}

interface Pending extends OutgoingEvent {
  readonly seq: number;
  /** Sends so far; the result of an older send no longer decides anything. */
  attempt: number;
  /** Times JetStream itself refused it (not the connection). */
  refusals: number;
  /** Told once whether the event was stored (or, without a stream, sent): true, or false when given up on. */
  settle: (stored: boolean) => void;
}

/**
 * `unknown`: not yet known whether a stream stores events; events wait while we look.
 * `stream`: published through JetStream, kept until acknowledged. `core`: no stream stores them; plain publishes.
 */
type Mode = 'unknown' | 'stream' | 'core';

const DEFAULTS = { maxPending: 10_000, ackTimeoutMs: 5_000, retryDelayMs: 100, maxRetryDelayMs: 5_000 };
/** Acknowledgements awaited at once. */
const WINDOW = 256;
/** Refusals by JetStream (not the connection) after which an event is given up on. */
const MAX_REFUSALS = 3;
/** Without a stream, how often we look again whether one has been created. */
const RECHECK_MS = 30_000;
/** Drops are summed into one log line per this interval. */
const DROP_REPORT_MS = 5_000;

/**
 * Publishes events in the order given, through JetStream, and keeps each one until the stream acknowledges it:
 * across a lost connection or a restarting nats-server the unacknowledged are sent again (their `Nats-Msg-Id`
 * lets the stream drop a copy it already has). When no stream stores events at all, it falls back to plain
 * publishes and says so once.
 *
 * @example
 * const outbox = new EventOutbox({ connection, logger });
 * outbox.add({ id: event.id, subject, data: JSON.stringify(event), headers: { traceparent } });
 * await outbox.settle(10_000); // before closing
 */
export class EventOutbox {
  readonly #nc: NatsConnection;
  readonly #logger: Logger;
  readonly #js: JetStreamClient;
  readonly #jsm: Promise<JetStreamManager>;
  readonly #settings: typeof DEFAULTS;
  /** Every event not yet stored (or sent, without a stream), oldest first. */
  readonly #pending = new Map<number, Pending>();
  readonly #inflight = new Set<Pending>();
  /** Events to send next, in order; may hold ones since acknowledged or dropped, which are skipped. */
  #queue: Pending[] = [];
  #head = 0;
  #seq = 0;
  #mode: Mode = 'unknown';
  #coreSince = 0;
  #probing = false;
  #connected = true;
  /** Bumped on every reconnect: what was in flight before belongs to the old connection. */
  #epoch = 0;
  #stopped = false;
  #sawStream = false;
  #warnedUnstored = false;
  /** Failed rounds in a row, for the backoff. */
  #failures = 0;
  #retryTimer: NodeJS.Timeout | undefined;
  #dropped = 0;
  #dropTimer: NodeJS.Timeout | undefined;
  readonly #idle = new Set<() => void>();

  constructor(opts: EventOutboxOptions) {
    this.#nc = opts.connection;
    this.#logger = opts.logger;
    this.#settings = {
      maxPending: opts.maxPending ?? DEFAULTS.maxPending,
      ackTimeoutMs: opts.ackTimeoutMs ?? DEFAULTS.ackTimeoutMs,
      retryDelayMs: opts.retryDelayMs ?? DEFAULTS.retryDelayMs,
      maxRetryDelayMs: opts.maxRetryDelayMs ?? DEFAULTS.maxRetryDelayMs,
    };
    this.#js = jetstream(opts.connection, { timeout: this.#settings.ackTimeoutMs });
    // No account-info check: a server without JetStream must still get its events, as plain messages.
    this.#jsm = jetstreamManager(opts.connection, { checkAPI: false, timeout: this.#settings.ackTimeoutMs });
  }

  /** Events not yet stored (or, without a stream, not yet sent). */
  get size(): number {
    return this.#pending.size;
  }

  /** True once {@link stop} has been called, or the connection has closed. */
  get stopped(): boolean {
    return this.#stopped;
  }

  /**
   * Queues an event and sends it as soon as the connection allows. Resolves true once it is stored (without a
   * stream: sent), false if it is given up on (dropped, refused, or abandoned when the outbox stops). Never rejects.
   */
  add(event: OutgoingEvent): Promise<boolean> {
    let settle: (stored: boolean) => void = () => {};
    const settled = new Promise<boolean>((resolve) => (settle = resolve));
    const entry: Pending = { ...event, seq: this.#seq++, attempt: 0, refusals: 0, settle };
    this.#pending.set(entry.seq, entry);
    this.#queue.push(entry);
    this.#enforceBound();
    // While nothing is sent (disconnected, or backing off) the queue only grows: drop what was dropped from it.
    if (this.#queue.length - this.#head > 2 * this.#pending.size + 1_000) this.#requeue();
    this.#pump();
    return settled;
  }

  /** Follows the connection: holds events while it is down, sends everything unacknowledged again once it is back. */
  connectionChanged(type: string): void {
    if (type === 'disconnect') {
      this.#connected = false;
      return;
    }
    if (type === 'close') {
      if (this.#stopped) return;
      const abandoned = this.stop();
      if (abandoned > 0) {
        this.#logger.error(
          { pendingEvents: abandoned },
          `the NATS connection closed with ${abandoned} events not yet stored; they are lost`,
        );
      }
      return;
    }
    if (type !== 'reconnect') return;
    this.#connected = true;
    this.#epoch += 1;
    this.#probing = false;
    this.#inflight.clear();
    this.#clearRetry();
    // A reconnect may be to a restarted server where the stream now exists, or no longer does.
    if (this.#mode === 'core') this.#mode = 'unknown';
    if (this.#pending.size > 0) {
      this.#logger.info(
        { pendingEvents: this.#pending.size },
        `sending ${this.#pending.size} events held while NATS was unreachable`,
      );
    }
    this.#requeue();
    this.#pump();
  }

  /** Resolves once every event is stored, or after `timeoutMs`, with the number still waiting. */
  async settle(timeoutMs: number): Promise<number> {
    if (this.#pending.size === 0 || this.#stopped) return this.#pending.size;
    let timer: NodeJS.Timeout | undefined;
    let done: (() => void) | undefined;
    await new Promise<void>((resolve) => {
      done = resolve;
      this.#idle.add(resolve);
      timer = setTimeout(resolve, timeoutMs);
    });
    clearTimeout(timer);
    if (done) this.#idle.delete(done);
    return this.#pending.size;
  }

  /** Stops sending and retrying; returns the number of events abandoned. */
  stop(): number {
    this.#stopped = true;
    this.#clearRetry();
    clearTimeout(this.#dropTimer);
    this.#dropTimer = undefined;
    this.#reportDropped();
    for (const resolve of this.#idle) resolve();
    this.#idle.clear();
    for (const entry of this.#pending.values()) entry.settle(false);
    return this.#pending.size;
  }

  #pump(): void {
    if (this.#stopped || !this.#connected || this.#retryTimer !== undefined || this.#probing) return;
    if (this.#pending.size === 0) return;
    if (this.#mode === 'core' && Date.now() - this.#coreSince > RECHECK_MS) this.#mode = 'unknown';
    if (this.#mode === 'unknown') {
      void this.#probe();
      return;
    }
    if (this.#mode === 'core') {
      this.#sendPlain();
      return;
    }
    while (this.#inflight.size < WINDOW) {
      const entry = this.#next();
      if (entry === undefined) break;
      this.#send(entry);
    }
  }

  /** The next queued event still waiting to be sent. */
  #next(): Pending | undefined {
    while (this.#head < this.#queue.length) {
      const entry = this.#queue[this.#head++] as Pending;
      if (this.#pending.get(entry.seq) === entry && !this.#inflight.has(entry)) return entry;
    }
    this.#queue = [];
    this.#head = 0;
    return undefined;
  }

  /** Queues every event not in flight again, oldest first. */
  #requeue(): void {
    this.#queue = [...this.#pending.values()].filter((entry) => !this.#inflight.has(entry));
    this.#head = 0;
  }

  #send(entry: Pending): void {
    entry.attempt += 1;
    const { attempt } = entry;
    const epoch = this.#epoch;
    this.#inflight.add(entry);
    this.#js
      .publish(entry.subject, entry.data, {
        msgID: entry.id,
        headers: toMsgHdrs(entry.headers),
        timeout: this.#settings.ackTimeoutMs,
      })
      .then(
        () => this.#acked(entry),
        (error: unknown) => {
          if (entry.attempt === attempt && epoch === this.#epoch) this.#failed(entry, error);
        },
      );
  }

  #acked(entry: Pending): void {
    this.#sawStream = true;
    this.#inflight.delete(entry);
    if (this.#pending.get(entry.seq) === entry) this.#pending.delete(entry.seq);
    entry.settle(true);
    if (this.#failures > 0) {
      this.#failures = 0;
      this.#logger.info({ pendingEvents: this.#pending.size }, 'events are being stored again');
    }
    this.#checkIdle();
    this.#pump();
  }

  #failed(entry: Pending, error: unknown): void {
    this.#inflight.delete(entry);
    if (this.#pending.get(entry.seq) !== entry || this.#stopped) return;
    if (error instanceof ClosedConnectionError || error instanceof DrainingConnectionError) return;
    if (error instanceof InvalidArgumentError) {
      this.#giveUp(entry, error);
      return;
    }
    if (!isConnectionTrouble(error)) {
      entry.refusals += 1;
      if (entry.refusals >= MAX_REFUSALS) {
        this.#giveUp(entry, error);
        return;
      }
    }
    // No one answered, or no ack came: look again whether a stream stores events before the next round.
    if (isNoJetStream(error) || error instanceof TimeoutError) this.#mode = 'unknown';
    this.#pause(error);
  }

  /** Asks the server whether the `EVENTS` stream exists, and so how events go out. */
  async #probe(): Promise<void> {
    this.#probing = true;
    const epoch = this.#epoch;
    let failure: unknown;
    try {
      await (await this.#jsm).streams.info(STREAMS.events);
    } catch (error) {
      failure = error;
    }
    if (epoch !== this.#epoch || this.#stopped) return;
    this.#probing = false;
    if (failure === undefined) {
      this.#mode = 'stream';
      this.#sawStream = true;
      this.#pump();
      return;
    }
    const why = this.#unstoredReason(failure);
    if (why === undefined) {
      this.#pause(failure);
      return;
    }
    this.#mode = 'core';
    this.#coreSince = Date.now();
    if (!this.#warnedUnstored) {
      this.#warnedUnstored = true;
      this.#logger.warn(
        { server: this.#nc.getServer(), stream: STREAMS.events },
        `events are not stored: ${why} on ${this.#nc.getServer()}; they go out as plain NATS messages, ` +
          'lost if NATS is unreachable. `troupe up` (ensureTroupeStreams) creates the stream.',
      );
    }
    this.#pump();
  }

  /** Why no stream can store events, when the server's answer says so; undefined when it may be passing trouble. */
  #unstoredReason(error: unknown): string | undefined {
    if (error instanceof JetStreamApiError && error.code === JetStreamApiCodes.StreamNotFound) {
      return `the JetStream stream ${STREAMS.events} does not exist`;
    }
    // A server that has stored our events before and now has no JetStream is most likely starting up again.
    if (isNoJetStream(error) && !this.#sawStream) return 'JetStream is not enabled';
    return undefined;
  }

  /** Without a stream: plain publishes, in order, while connected. */
  #sendPlain(): void {
    for (let entry = this.#next(); entry !== undefined; entry = this.#next()) {
      try {
        this.#nc.publish(entry.subject, entry.data, {
          headers: toMsgHdrs({ ...entry.headers, 'Nats-Msg-Id': entry.id }),
        });
      } catch (error) {
        if (error instanceof InvalidArgumentError) {
          this.#giveUp(entry, error);
          continue;
        }
        // Closed or draining: nothing more goes out on this connection.
        this.#head -= 1;
        return;
      }
      this.#pending.delete(entry.seq);
      entry.settle(true);
    }
    this.#checkIdle();
  }

  /** Waits before the next round; a reconnect ends the wait early. */
  #pause(error: unknown): void {
    if (this.#retryTimer !== undefined || this.#stopped) return;
    const { retryDelayMs, maxRetryDelayMs } = this.#settings;
    const base = Math.min(maxRetryDelayMs, retryDelayMs * 2 ** this.#failures);
    const delay = Math.round(base * (0.8 + Math.random() * 0.4));
    this.#failures += 1;
    this.#logger.warn(
      { err: error, pendingEvents: this.#pending.size, retryInMs: delay },
      `${this.#pending.size} events not yet stored (${messageOf(error)}); trying again in ${delay} ms`,
    );
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = undefined;
      this.#requeue();
      this.#pump();
    }, delay);
  }

  #clearRetry(): void {
    clearTimeout(this.#retryTimer);
    this.#retryTimer = undefined;
  }

  #giveUp(entry: Pending, error: unknown): void {
    this.#pending.delete(entry.seq);
    this.#inflight.delete(entry);
    entry.settle(false);
    this.#logger.error(
      { err: error, eventId: entry.id, subject: entry.subject },
      `gave up on event ${entry.id} on ${entry.subject}: ${messageOf(error)}`,
    );
    this.#checkIdle();
    this.#pump();
  }

  #enforceBound(): void {
    let dropped = 0;
    for (const oldest of this.#pending.values()) {
      if (this.#pending.size <= this.#settings.maxPending) break;
      this.#pending.delete(oldest.seq);
      this.#inflight.delete(oldest);
      oldest.settle(false);
      dropped += 1;
    }
    if (dropped === 0) return;
    this.#dropped += dropped;
    // A timer, even of 0 ms, sums a burst of drops into one line.
    if (this.#dropTimer === undefined) this.#dropTimer = setTimeout(() => this.#reportDropped(), 0);
  }

  /** Logs the drops since the last report, then waits before the next, so a long outage writes a line per interval. */
  #reportDropped(): void {
    this.#dropTimer = undefined;
    if (this.#dropped === 0) return;
    const dropped = this.#dropped;
    this.#dropped = 0;
    this.#logger.error(
      { dropped, maxPending: this.#settings.maxPending },
      `dropped the ${dropped} oldest unsent events: more than ${this.#settings.maxPending} were waiting for NATS`,
    );
    if (!this.#stopped) this.#dropTimer = setTimeout(() => this.#reportDropped(), DROP_REPORT_MS);
  }

  #checkIdle(): void {
    if (this.#pending.size > 0) return;
    for (const resolve of this.#idle) resolve();
    this.#idle.clear();
  }
}

/** The server has no JetStream (or is not yet serving it): its API, or the stream's subject, had no responders. */
function isNoJetStream(error: unknown): boolean {
  return error instanceof Error && error.name === 'JetStreamNotEnabled';
}

/** Trouble reaching the stream, as opposed to the stream refusing the event. */
function isConnectionTrouble(error: unknown): boolean {
  return (
    isNoJetStream(error) ||
    error instanceof TimeoutError ||
    (error instanceof Error && error.name === 'RequestError')
  );
}

function toMsgHdrs(record: Record<string, string>): MsgHdrs {
  const hdrs = createHeaders();
  for (const [key, value] of Object.entries(record)) hdrs.set(key, value);
  return hdrs;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
