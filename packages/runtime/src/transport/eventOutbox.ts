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
import { errorMessage, STREAMS } from '@troupe/protocol';
import { type Actor, createActor } from 'xstate';
import { type Clock, systemClock } from '../events/clock.ts';
import type { Logger } from '../logging/logger.ts';
import { outboxMachine } from './outboxMachine.ts';

export interface EventOutboxOptions {
  connection: NatsConnection;
  logger: Logger;
  /**
   * Messages (events, or batches of them) kept until stored; past it the oldest are dropped, with an error logged.
   * Default 10,000.
   */
  maxPending?: number;
  /** How long one attempt waits for JetStream's acknowledgement; default 5 s. */
  ackTimeoutMs?: number;
  /** Pause after the first failed attempt; it doubles with each failure in a row, up to `maxRetryDelayMs`. Default 100 ms. */
  retryDelayMs?: number;
  /** Default 5 s. */
  maxRetryDelayMs?: number;
  /** Time for the backoff and the waits; the system's by default. */
  clock?: Clock;
}

/** An event to publish: its subject, JSON payload, id (its `Nats-Msg-Id`) and extra headers. */
export interface OutgoingEvent {
  id: string;
  subject: string;
  data: string;
  headers: Record<string, string>;
  /** How many events the message carries: a batch's count, 1 when absent. */
  events?: number;
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

const DEFAULTS = { maxPending: 10_000, ackTimeoutMs: 5_000, retryDelayMs: 100, maxRetryDelayMs: 5_000 };
/** Acknowledgements awaited at once. */
const WINDOW = 256;
/** Refusals by JetStream (not the connection) after which an event is given up on. */
const MAX_REFUSALS = 3;
/** Drops are summed into one log line per this interval. */
const DROP_REPORT_MS = 5_000;

/**
 * Publishes events in the order given, through JetStream, and keeps each one until the stream acknowledges it:
 * across a lost connection or a restarting nats-server the unacknowledged are sent again (their `Nats-Msg-Id`
 * lets the stream drop a copy it already has). When no stream stores events at all, it falls back to plain
 * publishes and says so once.
 *
 * When events go out, and how (probing for the stream, streaming, plain, backing off, disconnected, stopped), is the
 * state of an actor ({@link outboxMachine}) that hears the connection's changes and the sends' failures; this class
 * keeps the queue and sends what that state allows.
 *
 * @example
 * const outbox = new EventOutbox({ connection, logger });
 * outbox.add({ id: event.id, subject, data: JSON.stringify(event), headers: { traceparent } });
 * await outbox.settle(10_000); // before closing
 */
export class EventOutbox {
  readonly #nc: NatsConnection;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #js: JetStreamClient;
  readonly #settings: typeof DEFAULTS;
  readonly #lifecycle: Actor<typeof outboxMachine>;
  /** The lifecycle's state, as last seen. */
  #state: string;
  /** Every event not yet stored (or sent, without a stream), oldest first. */
  readonly #pending = new Map<number, Pending>();
  /** The events the messages in {@link #pending} carry. */
  #events = 0;
  readonly #inflight = new Set<Pending>();
  /** Events to send next, in order; may hold ones since acknowledged or dropped, which are skipped. */
  #queue: Pending[] = [];
  #head = 0;
  #seq = 0;
  /** Bumped on every reconnect: what was in flight before belongs to the old connection. */
  #epoch = 0;
  #dropped = 0;
  #dropTimer: unknown;
  readonly #idle = new Set<() => void>();

  constructor(opts: EventOutboxOptions) {
    this.#nc = opts.connection;
    this.#logger = opts.logger;
    this.#clock = opts.clock ?? systemClock;
    this.#settings = {
      maxPending: opts.maxPending ?? DEFAULTS.maxPending,
      ackTimeoutMs: opts.ackTimeoutMs ?? DEFAULTS.ackTimeoutMs,
      retryDelayMs: opts.retryDelayMs ?? DEFAULTS.retryDelayMs,
      maxRetryDelayMs: opts.maxRetryDelayMs ?? DEFAULTS.maxRetryDelayMs,
    };
    this.#js = jetstream(opts.connection, { timeout: this.#settings.ackTimeoutMs });
    // No account-info check: a server without JetStream must still get its events, as plain messages.
    const jsm: Promise<JetStreamManager> = jetstreamManager(opts.connection, {
      checkAPI: false,
      timeout: this.#settings.ackTimeoutMs,
    });
    const server = () => this.#nc.getServer();
    this.#lifecycle = createActor(outboxMachine, {
      clock: this.#clock,
      input: {
        retryDelayMs: this.#settings.retryDelayMs,
        maxRetryDelayMs: this.#settings.maxRetryDelayMs,
        probe: async () => (await jsm).streams.info(STREAMS.events),
        unstoredReason,
        onUnstored: (why) =>
          this.#logger.warn(
            { server: server(), stream: STREAMS.events },
            `events are not stored: ${why} on ${server()}; they go out as plain NATS messages, ` +
              'lost if NATS is unreachable. `troupe up` (ensureTroupeStreams) creates the stream.',
          ),
        onBackoff: (error, delayMs) =>
          this.#logger.warn(
            { err: error, pendingEvents: this.#events, retryInMs: delayMs },
            `${this.#events} events not yet stored (${errorMessage(error)}); trying again in ${delayMs} ms`,
          ),
        onRecovered: () =>
          this.#logger.info({ pendingEvents: this.#events }, 'events are being stored again'),
        random: Math.random,
        hasPending: () => this.#pending.size > 0,
      },
    });
    this.#state = 'idle';
    this.#lifecycle.subscribe((snapshot) => {
      if (snapshot.value === this.#state) return;
      this.#state = snapshot.value;
      // Sending may go on: everything not yet stored is queued again, oldest first.
      if (this.#state === 'streaming' || this.#state === 'plain') {
        this.#requeue();
        this.#pump();
      }
    });
    this.#lifecycle.start();
  }

  /** Messages not yet stored (or, without a stream, not yet sent): events, and batches of them. */
  get size(): number {
    return this.#pending.size;
  }

  /** Events not yet stored (or, without a stream, not yet sent), those in batches counted one by one. */
  get events(): number {
    return this.#events;
  }

  /** True once {@link stop} has been called, or the connection has closed. */
  get stopped(): boolean {
    return this.#state === 'stopped';
  }

  /**
   * Queues an event and sends it as soon as the connection allows. Resolves true once it is stored (without a
   * stream: sent), false if it is given up on (dropped, refused, or abandoned when the outbox stops). Never rejects.
   */
  add(event: OutgoingEvent): Promise<boolean> {
    // A batch that closes after the outbox stopped (its linger outlived the connection) is given up on, not kept.
    if (this.stopped) return Promise.resolve(false);
    let settle: (stored: boolean) => void = () => {};
    const settled = new Promise<boolean>((resolve) => (settle = resolve));
    const entry: Pending = { ...event, seq: this.#seq++, attempt: 0, refusals: 0, settle };
    this.#pending.set(entry.seq, entry);
    this.#events += entry.events ?? 1;
    this.#queue.push(entry);
    this.#enforceBound();
    // While nothing is sent (disconnected, or backing off) the queue only grows: drop what was dropped from it.
    if (this.#queue.length - this.#head > 2 * this.#pending.size + 1_000) this.#requeue();
    this.#pump();
    return settled;
  }

  /** Follows the connection: holds events while it is down, sends everything unacknowledged again once it is back. */
  connectionChanged(type: string): void {
    if (this.stopped) return;
    if (type === 'disconnect') {
      this.#lifecycle.send({ type: 'disconnect' });
      return;
    }
    if (type === 'close') {
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
    this.#epoch += 1;
    this.#inflight.clear();
    if (this.#pending.size > 0) {
      this.#logger.info(
        { pendingEvents: this.#events },
        `sending ${this.#events} events held while NATS was unreachable`,
      );
    }
    this.#requeue();
    this.#lifecycle.send({ type: 'reconnect' });
    this.#pump();
  }

  /** Resolves once every event is stored, or after `timeoutMs`, with the number still waiting. */
  async settle(timeoutMs: number): Promise<number> {
    if (this.#pending.size === 0 || this.stopped) return this.#pending.size;
    let timer: unknown;
    let done: (() => void) | undefined;
    await new Promise<void>((resolve) => {
      done = resolve;
      this.#idle.add(resolve);
      timer = this.#clock.setTimeout(resolve, timeoutMs);
    });
    this.#clock.clearTimeout(timer);
    if (done) this.#idle.delete(done);
    return this.#pending.size;
  }

  /** Stops sending and retrying; returns the number of events abandoned (those in batches one by one). */
  stop(): number {
    this.#lifecycle.send({ type: 'stop' });
    this.#state = 'stopped';
    this.#clock.clearTimeout(this.#dropTimer);
    this.#dropTimer = undefined;
    this.#reportDropped();
    for (const resolve of this.#idle) resolve();
    this.#idle.clear();
    for (const entry of this.#pending.values()) entry.settle(false);
    return this.#events;
  }

  #pump(): void {
    if (this.#pending.size === 0) return;
    if (this.#state === 'idle') {
      this.#lifecycle.send({ type: 'pending' });
      return;
    }
    if (this.#state === 'plain') {
      this.#sendPlain();
      return;
    }
    if (this.#state !== 'streaming') return;
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
    this.#inflight.delete(entry);
    this.#forget(entry);
    entry.settle(true);
    // Only news to the lifecycle after failures (the backoff starts over) or before the stream was seen.
    const { failures, sawStream } = this.#lifecycle.getSnapshot().context;
    if (failures > 0 || !sawStream) this.#lifecycle.send({ type: 'stored' });
    this.#checkIdle();
    this.#pump();
  }

  #failed(entry: Pending, error: unknown): void {
    this.#inflight.delete(entry);
    if (this.#pending.get(entry.seq) !== entry || this.stopped) return;
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
    const probe = isNoJetStream(error) || error instanceof TimeoutError;
    this.#lifecycle.send({ type: 'sendFailed', error, probe });
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
      this.#forget(entry);
      entry.settle(true);
    }
    this.#checkIdle();
  }

  #giveUp(entry: Pending, error: unknown): void {
    this.#forget(entry);
    this.#inflight.delete(entry);
    entry.settle(false);
    this.#logger.error(
      { err: error, eventId: entry.id, subject: entry.subject },
      `gave up on event ${entry.id} on ${entry.subject}: ${errorMessage(error)}`,
    );
    this.#checkIdle();
    this.#pump();
  }

  #enforceBound(): void {
    let dropped = 0;
    for (const oldest of this.#pending.values()) {
      if (this.#pending.size <= this.#settings.maxPending) break;
      this.#forget(oldest);
      this.#inflight.delete(oldest);
      oldest.settle(false);
      dropped += oldest.events ?? 1;
    }
    if (dropped === 0) return;
    this.#dropped += dropped;
    // A timer, even of 0 ms, sums a burst of drops into one line.
    if (this.#dropTimer === undefined)
      this.#dropTimer = this.#clock.setTimeout(() => this.#reportDropped(), 0);
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
    if (!this.stopped) this.#dropTimer = this.#clock.setTimeout(() => this.#reportDropped(), DROP_REPORT_MS);
  }

  /** Takes a message out of those waiting, with the events it carries. */
  #forget(entry: Pending): void {
    if (this.#pending.get(entry.seq) !== entry) return;
    this.#pending.delete(entry.seq);
    this.#events -= entry.events ?? 1;
  }

  #checkIdle(): void {
    if (this.#pending.size > 0) return;
    for (const resolve of this.#idle) resolve();
    this.#idle.clear();
  }
}

/**
 * Why no stream can store events, when the server's answer says so; undefined when it may be passing trouble. A
 * server that has stored our events before and now has no JetStream is most likely starting up again.
 */
function unstoredReason(error: unknown, sawStream: boolean): string | undefined {
  if (error instanceof JetStreamApiError && error.code === JetStreamApiCodes.StreamNotFound) {
    return `the JetStream stream ${STREAMS.events} does not exist`;
  }
  if (isNoJetStream(error) && !sawStream) return 'JetStream is not enabled';
  return undefined;
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
