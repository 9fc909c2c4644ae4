import { randomUUID } from 'node:crypto';
import type { NatsConnection } from '@nats-io/transport-node';
import { type InvalidMessageEvent, subjects, type TroupeEvent } from '@troupe/protocol';
import type { z } from 'zod';
import type { Logger } from '../logging/logger.ts';
import { logMessage, type MessageLogLevel, type MessageMeta } from '../logging/messageLog.ts';
import { withTimeout } from '../withTimeout.ts';
import type {
  BusSubscription,
  Delivery,
  JetStreamBus,
  Listening,
  ReplyMessage,
  RequestOptions,
  StatusListener,
  SubscribeOptions,
} from './bus.ts';
import { ConnectionStatus } from './connectionStatus.ts';
import { checkedLingerMs } from './eventBatcher.ts';
import { EventPublisher } from './eventPublisher.ts';
import { deliverMessage, TEXT } from './messageDelivery.ts';
import { metaFromSubject } from './messageMeta.ts';
import type { NatsAccess } from './natsAccess.ts';
import { type ConnectOptions, connectNats, serverList } from './natsConnect.ts';
import { asClosedError, closedError } from './natsErrors.ts';
import { toMsgHdrs } from './natsHeaders.ts';
import { NatsRequests } from './natsRequests.ts';
import { SubscriptionSet } from './subscriptionSet.ts';
import { TransportError } from './transportError.ts';

export type { MessageMeta } from '../logging/messageLog.ts';

export interface BusOptions extends ConnectOptions {
  /** Level of the one line logged per message; default `info`. */
  messageLogLevel?: MessageLogLevel;
  /** Clock for report timestamps; injected in tests. */
  now?: () => Date;
  /** Id generator for reports; injected in tests. */
  newId?: () => string;
  /**
   * Messages of events (an event, or a batch of them) kept while NATS or the `EVENTS` stream is unreachable; past it
   * the oldest are dropped. Default 10,000.
   */
  maxPendingEvents?: number;
  /** How long one attempt to store an event waits for JetStream's acknowledgement; default 5 s. */
  eventAckTimeoutMs?: number;
  /**
   * Send a task's model, tool and step events gathered into one `EventBatch` message instead of one message each
   * (docs/protocol.md, "Event batches"); `task.*`, `approval.*`, `human.*` and `eval.*` events always go alone. On by
   * default; unset here, the environment's `TROUPE_EVENT_BATCH=0` turns it off: for a raw NATS subscriber by kind, or
   * a reader older than batching, which skips batches. Readers through `eventsOf` see each event either way; a raw
   * subscriber to `troupe.events.>` sees batches. A message this bus sends (a step's reply or request, any publish)
   * sends the open batches first, so another process that acts on it (a coordinator ending the task on a step's
   * reply) stores its events after them, as without batching.
   */
  eventBatch?: boolean;
  /**
   * How long a task's batch waits for more of its events before it goes; default 20 ms. A `task.*` event, 64 events
   * or 256 KiB of them, any other message this bus sends, or {@link NatsBus.sendOpenEvents} (a coordinator, before it
   * writes the task's checkpoint), send it sooner.
   */
  eventBatchLingerMs?: number;
}

/**
 * Connects to NATS (see {@link NatsBus.connect}) and hands back the connection as the interface apps hold: they take
 * a {@link JetStreamBus} (or a plain `Bus`), never the class.
 */
export function connectBus(opts: BusOptions): Promise<JetStreamBus> {
  return NatsBus.connect(opts);
}

const DEFAULT_DRAIN_TIMEOUT_MS = 10_000;

/**
 * What marks a {@link NatsBus}, for {@link natsConnectionOf}: a registered symbol, the same in every copy of this
 * module. The CLI bundles each command apart (scripts/buildCli.mjs): `troupe up --gateway` hands the bus up's bundle
 * made to the gateway's bundle, which has a copy of this class of its own, so `instanceof` would refuse it.
 */
const NATS_BUS = Symbol.for('troupe.NatsBus');

/**
 * Troupe's one interface over NATS: JSON messages validated by protocol schemas, one log line per message,
 * invalid messages answered or reported instead of dropped. It composes its parts: {@link SubscriptionSet} and
 * {@link deliverMessage} for what comes in, {@link NatsRequests} for requests and their replies,
 * {@link EventPublisher} for events, {@link ConnectionStatus} for the connection's changes; it owns their order
 * when it drains and closes.
 *
 * @example
 * const bus = await NatsBus.connect({ servers: 'nats://127.0.0.1:4222', name: 'troupe-worker', logger });
 * bus.subscribe(subjects.agent('demo', 'executor'), AgentStepRequest, (d) => d.respond(run(d.value)), {
 *   queue: 'executor',
 *   reporter: 'agent:executor',
 * });
 */
export class NatsBus implements JetStreamBus {
  readonly [NATS_BUS] = true;
  /**
   * The raw nats.js connection: for the runtime's JetStream, KV and object-store modules (through
   * {@link natsConnectionOf}) and for tests. Not part of {@link JetStreamBus}, which is what apps hold.
   */
  readonly connection: NatsConnection;
  readonly name: string;
  /** The servers it was told to connect to, for a second connection to the same place (see HeartbeatSender). */
  readonly servers: readonly string[];
  /** How it logged in, for a second connection made the same way. */
  readonly access: NatsAccess | undefined;
  /** The logger the bus writes its message lines to. */
  readonly logger: Logger;
  readonly #level: MessageLogLevel;
  readonly #now: () => Date;
  readonly #newId: () => string;
  readonly #subscriptions: SubscriptionSet;
  readonly #requests: NatsRequests;
  readonly #events: EventPublisher;
  readonly #status: ConnectionStatus;
  /** Aborted once the bus closes or drains: every wait on NATS (see untilReachable) ends then. */
  readonly #closing = new AbortController();

  private constructor(connection: NatsConnection, opts: BusOptions) {
    this.connection = connection;
    this.name = opts.name;
    this.servers = serverList(opts.servers);
    this.access = opts.access;
    this.logger = opts.logger;
    this.#level = opts.messageLogLevel ?? 'info';
    this.#now = opts.now ?? (() => new Date());
    this.#newId = opts.newId ?? randomUUID;
    this.#subscriptions = new SubscriptionSet(connection, opts.logger);
    this.#requests = new NatsRequests(connection, opts.logger, this.#level, opts.access?.inboxPrefix);
    this.#events = new EventPublisher({
      connection,
      logger: opts.logger,
      level: this.#level,
      ...(opts.maxPendingEvents === undefined ? {} : { maxPending: opts.maxPendingEvents }),
      ...(opts.eventAckTimeoutMs === undefined ? {} : { ackTimeoutMs: opts.eventAckTimeoutMs }),
      batch: opts.eventBatch ?? batchingByEnvironment(opts.logger),
      ...(opts.eventBatchLingerMs === undefined ? {} : { lingerMs: opts.eventBatchLingerMs }),
    });
    this.#status = new ConnectionStatus(connection, opts.logger, (type) => {
      if (type === 'close') {
        this.#closing.abort(closedError('the NATS connection is closed'));
        // Batches still gathering go into the outbox first, to be counted among the events lost.
        this.#events.flush();
      }
      this.#events.outbox.connectionChanged(type);
    });
  }

  /**
   * Connects to NATS; fails with `connect_failed` naming the servers when none answers, and with a `RangeError`, before
   * connecting, for an `eventBatchLingerMs` that is not a number of milliseconds, 0 or more.
   */
  static async connect(opts: BusOptions): Promise<NatsBus> {
    // Checked before connecting: a bus that cannot be made must not leave a connection open.
    if (opts.eventBatchLingerMs !== undefined) checkedLingerMs(opts.eventBatchLingerMs);
    return new NatsBus(await connectNats(opts), opts);
  }

  /** The server this connection is on now, e.g. `127.0.0.1:4222`. */
  get server(): string {
    return this.connection.getServer();
  }

  /** The level message lines are logged at. */
  get messageLogLevel(): MessageLogLevel {
    return this.#level;
  }

  /** Publishes a JSON payload and logs one `out` line (a reply's says who answers whom: see `replyMeta`). */
  publish(subject: string, payload: unknown, meta?: MessageMeta, headers?: Record<string, string>): void {
    const options = headers === undefined ? undefined : { headers: toMsgHdrs(headers) };
    this.#events.flush();
    try {
      this.connection.publish(subject, JSON.stringify(payload), options);
    } catch (error) {
      throw asClosedError(error, subject) ?? error;
    }
    logMessage(this.logger, this.#level, 'out', subject, meta ?? metaFromSubject(subject));
  }

  /**
   * Publishes an event on its subject, carrying its trace context and its id (`Nats-Msg-Id`, for JetStream
   * de-duplication). Returns at once: the event waits in an outbox until the `EVENTS` stream acknowledges it,
   * and is sent again after a lost connection (see `EventOutbox`). Fails with `closed` once the bus is.
   * The promise (which never rejects) says whether the event was stored; most callers need not wait for it.
   */
  publishEvent(event: TroupeEvent): Promise<boolean> {
    return this.#events.publish(event);
  }

  /**
   * Sends the task's open batch of events now, if it has one, without waiting for it to be stored: the messages this
   * connection sends after it reach the server after it. Nothing to do with batching off.
   */
  sendOpenEvents(pipeline: string, taskId: string): void {
    this.#events.sendOpen(pipeline, taskId);
  }

  /** Calls `listener` with each event this bus publishes (as it is handed to the outbox); returns how to stop. */
  onEventPublished(listener: (event: TroupeEvent) => void): () => void {
    return this.#events.onPublished(listener);
  }

  /** Events published but not yet stored by the `EVENTS` stream (or, without a stream, not yet sent). */
  get pendingEvents(): number {
    return this.#events.pending;
  }

  /** Publishes a `message.invalid` report on `troupe.events._invalid`. */
  reportInvalid(report: Omit<InvalidMessageEvent, 'id' | 'ts' | 'kind'>): void {
    const event: InvalidMessageEvent = {
      id: this.#newId(),
      ts: this.#now().toISOString(),
      kind: 'message.invalid',
      ...report,
    };
    const meta: MessageMeta = { kind: event.kind };
    if (event.taskId !== undefined) meta.taskId = event.taskId;
    this.publish(subjects.invalid, event, meta);
  }

  /**
   * Delivers each message that matches `schema` to `handler`. A message that does not match is answered with an
   * `ErrorReply` when its sender asked for a reply, else reported on `troupe.events._invalid`. A handler that
   * throws is logged (and answered with `handler_failed`); neither ends the subscription.
   */
  subscribe<S extends z.ZodType>(
    subject: string,
    schema: S,
    handler: (delivery: Delivery<z.infer<S>>) => void | Promise<void>,
    opts: SubscribeOptions<z.infer<S>> = {},
  ): BusSubscription {
    return this.#subscriptions.add(subject, opts.queue, (msg) =>
      deliverMessage(this, msg, schema, handler, opts),
    );
  }

  /**
   * Delivers every message as text, unvalidated: for watchers that must see even what is not JSON (the intake
   * guard reports tasks for unknown pipelines whatever their payload). Prefer {@link subscribe}.
   */
  subscribeText(
    subject: string,
    handler: (delivery: Delivery<string>) => void | Promise<void>,
    opts: SubscribeOptions<string> = {},
  ): BusSubscription {
    return this.subscribe(subject, TEXT, handler, opts);
  }

  /**
   * Sends a request and returns its validated reply. Fails with a {@link TransportError}: `no_responders`,
   * `timeout`, `aborted`, `invalid_reply`, or the code of an `ErrorReply` the responder sent.
   */
  request<S extends z.ZodType>(
    subject: string,
    payload: unknown,
    replySchema: S,
    opts: RequestOptions,
  ): Promise<z.infer<S>> {
    this.#events.flush();
    return this.#requests.request(subject, payload, replySchema, opts);
  }

  requestReplies(subject: string, payload: unknown, onReply: (reply: ReplyMessage) => void): () => void {
    this.#events.flush();
    return this.#requests.requestReplies(subject, payload, onReply);
  }

  acknowledge(reply: string, meta?: MessageMeta): void {
    this.#requests.acknowledge(reply, meta);
  }

  /** See {@link NatsRequests.stillListening}. */
  stillListening(
    subject: string,
    payload: unknown,
    timeoutMs: number,
    meta?: MessageMeta,
  ): Promise<Listening> {
    return this.#requests.stillListening(subject, payload, timeoutMs, meta);
  }

  /** Whether the connection is up now: false while it is lost and being made again. */
  get reachable(): boolean {
    return this.#status.reachable;
  }

  /** Aborted once the bus starts to drain or close, so that a wait on NATS need not outlive it. */
  get closing(): AbortSignal {
    return this.#closing.signal;
  }

  /** Resolves once the server has seen everything published so far. */
  flush(): Promise<void> {
    return this.connection.flush();
  }

  /** Calls `listener` on every connection status change (disconnect, reconnect, errors, …); returns how to stop. */
  onStatus(listener: StatusListener): () => void {
    return this.#status.onStatus(listener);
  }

  /**
   * Stops taking messages, lets running handlers finish, waits for the events they published to be stored, sends
   * what is pending and closes: all of it within `timeoutMs`, after which (or at once, for what needs the server,
   * while NATS is unreachable) it closes anyway. Never rejects; the connection is closed when it resolves.
   */
  async drain(timeoutMs = DEFAULT_DRAIN_TIMEOUT_MS): Promise<void> {
    if (this.connection.isClosed() || this.connection.isDraining()) return;
    this.#closing.abort(closedError('the NATS connection is draining'));
    const deadline = performance.now() + timeoutMs;
    const left = () => Math.max(0, deadline - performance.now());
    await this.#subscriptions.drain(this.reachable, left, timeoutMs);
    // Events wait for the server only while it answers: a caller that would wait for a lost one does so before.
    this.#events.flush();
    const outbox = this.#events.outbox;
    if (this.reachable) await outbox.settle(left());
    const unstored = outbox.stop();
    if (unstored > 0) {
      this.logger.error(
        { pendingEvents: unstored, timeoutMs, reachable: this.reachable },
        `${unstored} events were not stored within ${timeoutMs} ms${this.reachable ? '' : ' (NATS is unreachable)'}; closing without them`,
      );
    }
    if (this.connection.isClosed()) return;
    const drained = this.reachable
      ? await withTimeout(
          this.connection.drain().then(
            () => 'drained' as const,
            () => 'failed' as const,
          ),
          left(),
        )
      : 'unreachable';
    if (drained !== 'drained') await this.close().catch(() => undefined);
  }

  /** Closes the connection at once; pending requests fail, and events not yet stored are abandoned (and counted). */
  async close(): Promise<void> {
    this.#closing.abort(closedError('the NATS connection is closed'));
    if (this.connection.isClosed()) return;
    // A drain has stopped the outbox already, and said what it left.
    this.#events.flush();
    const outbox = this.#events.outbox;
    const abandoned = outbox.stopped ? 0 : outbox.stop();
    if (abandoned > 0) {
      this.logger.error(
        { pendingEvents: abandoned },
        `closing with ${abandoned} events not yet stored; they are lost`,
      );
    }
    // Writes queued just before (unsubscribes) go out first: on a socket the server has just ended, nats.js's
    // close would otherwise remove the socket's error listener before the failed write reports, and crash the process.
    await new Promise((resolve) => setImmediate(resolve));
    if (this.connection.isClosed()) return;
    await this.connection.close();
  }
}

/**
 * Whether events go in batches when `BusOptions.eventBatch` does not say: yes, unless `TROUPE_EVENT_BATCH` is `0`.
 * Another value but `1` is warned about (`troupe up` and `troupe worker` refuse it), and batching stays on.
 */
function batchingByEnvironment(logger: Logger): boolean {
  const value = process.env.TROUPE_EVENT_BATCH;
  const batching = eventBatchSetting(value);
  if (batching !== undefined) return batching;
  logger.warn(
    { TROUPE_EVENT_BATCH: value },
    `TROUPE_EVENT_BATCH=${value} is neither 0 nor 1: events go in batches (0 sends each alone)`,
  );
  return true;
}

/**
 * What a `TROUPE_EVENT_BATCH` value says: `0` each event alone, `1` (or unset, or empty) in batches; undefined for any
 * other value, which its reader refuses or warns about.
 */
export function eventBatchSetting(value: string | undefined): boolean | undefined {
  if (value === undefined || value === '' || value === '1') return true;
  if (value === '0') return false;
  return undefined;
}

/**
 * The nats.js connection under a bus, for the runtime's JetStream, KV and object-store modules: what apps hold is
 * the {@link JetStreamBus} interface, which has none. Fails with `not_nats` for a bus that is not over NATS.
 */
export function natsConnectionOf(bus: JetStreamBus): NatsConnection {
  if (isNatsBus(bus)) return bus.connection;
  throw new TransportError(
    'not_nats',
    `the bus ${bus.name} is not a NATS connection; JetStream needs one (NatsBus)`,
  );
}

const isNatsBus = (bus: JetStreamBus): bus is NatsBus => NATS_BUS in bus;
