import { randomBytes, randomUUID } from 'node:crypto';
import {
  ClosedConnectionError,
  connect,
  headers as createHeaders,
  DrainingConnectionError,
  type Msg,
  type MsgHdrs,
  type NatsConnection,
  RequestError,
  type Subscription,
  TimeoutError,
} from '@nats-io/transport-node';
import {
  ErrorReply,
  errorMessage,
  type InvalidMessageEvent,
  type ParseResult,
  parseMessage,
  parseSubject,
  ROOT,
  subjects,
  type TroupeEvent,
} from '@troupe/protocol';
import pRetry from 'p-retry';
import { z } from 'zod';
import type { Logger } from '../logging/logger.ts';
import {
  logMessage,
  logRefusedMessage,
  type MessageLogLevel,
  type MessageMeta,
  messageLogFields,
  replyMeta,
} from '../logging/messageLog.ts';
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
import { EventOutbox } from './eventOutbox.ts';
import { connectionOptions, type NatsAccess } from './natsAccess.ts';
import { TransportError } from './transportError.ts';

export type { MessageMeta } from '../logging/messageLog.ts';

export interface BusOptions {
  servers: string | string[];
  /** Client name the server shows for this connection, e.g. `troupe-coordinator`. */
  name: string;
  logger: Logger;
  /** Reconnect after a lost connection, without limit; default true. */
  reconnect?: boolean;
  /** Level of the one line logged per message; default `info`. */
  messageLogLevel?: MessageLogLevel;
  /** Clock for report timestamps; injected in tests. */
  now?: () => Date;
  /** Id generator for reports; injected in tests. */
  newId?: () => string;
  /** Events kept while NATS or the `EVENTS` stream is unreachable; past it the oldest are dropped. Default 10,000. */
  maxPendingEvents?: number;
  /** How long one attempt to store an event waits for JetStream's acknowledgement; default 5 s. */
  eventAckTimeoutMs?: number;
  /** How to log in to NATS and talk TLS to it; nothing (and the shared inbox prefix) by default. */
  access?: NatsAccess;
  /**
   * How long to keep trying to make the first connection, backing off and logging each wait, for a service that
   * may start while NATS is down; 0 (the default) fails at once, as a command someone waits for should.
   */
  waitForServerMs?: number;
  /** Ends a wait for the server (see `waitForServerMs`) at once: the connect then fails with `aborted`. */
  signal?: AbortSignal;
}

/**
 * Connects to NATS (see {@link NatsBus.connect}) and hands back the connection as the interface apps hold: they take
 * a {@link JetStreamBus} (or a plain `Bus`), never the class.
 */
export function connectBus(opts: BusOptions): Promise<JetStreamBus> {
  return NatsBus.connect(opts);
}

/** Marks a subscription that takes raw text (see {@link NatsBus.subscribeText}). */
const TEXT = z.string();

function decodeText(data: Uint8Array): ParseResult<string> {
  try {
    return { ok: true, value: new TextDecoder('utf-8', { fatal: true }).decode(data) };
  } catch {
    return { ok: false, reason: 'payload is not valid UTF-8', issues: [] };
  }
}

/** The servers to connect to: a list, or `nats://a:4222,nats://b:4222` as NATS_URL often lists a cluster's. */
function serverList(servers: string | readonly string[]): string[] {
  return (typeof servers === 'string' ? [servers] : [...servers]).flatMap((s) =>
    s
      .split(',')
      .map((part) => part.trim())
      .filter(Boolean),
  );
}

/** The part of a client's inbox prefix where the replies of agent hosts, to its step calls, come. */
export const STEP_INBOXES = 'steps';

/** Characters of an invalid payload quoted in its report. */
const PAYLOAD_EXCERPT = 2_000;
const DEFAULT_DRAIN_TIMEOUT_MS = 10_000;
/** How long a command's first connection may take, handshake and login included. */
const FIRST_CONNECT_TIMEOUT_MS = 5_000;

const lenientDecoder = new TextDecoder('utf-8', { fatal: false });

interface TrackedSubscription {
  sub: Subscription;
  settled: () => Promise<void>;
}

/**
 * Troupe's one interface over NATS: JSON messages validated by protocol schemas, one log line per message,
 * invalid messages answered or reported instead of dropped.
 *
 * @example
 * const bus = await NatsBus.connect({ servers: 'nats://127.0.0.1:4222', name: 'troupe-worker', logger });
 * bus.subscribe(subjects.agent('demo', 'executor'), AgentStepRequest, (d) => d.respond(run(d.value)), {
 *   queue: 'executor',
 *   reporter: 'agent:executor',
 * });
 */
export class NatsBus implements JetStreamBus {
  /** The raw connection, for JetStream and KV inside the transport folder only. */
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
  readonly #listeners = new Set<StatusListener>();
  readonly #eventListeners = new Set<(event: TroupeEvent) => void>();
  readonly #subscriptions = new Set<TrackedSubscription>();
  readonly #events: EventOutbox;
  /** Aborted once the bus closes or drains: every wait on NATS (see untilReachable) ends then. */
  readonly #closing = new AbortController();
  /** False from a lost connection until it is back. */
  #reachable = true;

  private constructor(connection: NatsConnection, opts: BusOptions) {
    this.connection = connection;
    this.name = opts.name;
    this.servers = serverList(opts.servers);
    this.access = opts.access;
    this.logger = opts.logger;
    this.#level = opts.messageLogLevel ?? 'info';
    this.#now = opts.now ?? (() => new Date());
    this.#newId = opts.newId ?? randomUUID;
    this.#events = new EventOutbox({
      connection,
      logger: opts.logger,
      ...(opts.maxPendingEvents === undefined ? {} : { maxPending: opts.maxPendingEvents }),
      ...(opts.eventAckTimeoutMs === undefined ? {} : { ackTimeoutMs: opts.eventAckTimeoutMs }),
    });
    void this.#watchStatus();
  }

  /** Connects to NATS; fails with `connect_failed` naming the servers when none answers. */
  static async connect(opts: BusOptions): Promise<NatsBus> {
    const servers = serverList(opts.servers);
    const reconnect = opts.reconnect ?? true;
    const waitMs = opts.waitForServerMs ?? 0;
    let connection: NatsConnection;
    const attempt = () =>
      connect({
        ...connectionOptions(opts.access),
        servers,
        name: opts.name,
        // A command someone waits for gives up on a handshake that stalls (a server that wants a client
        // certificate drops a TLS 1.3 client without one only after the handshake, and nats.js then waits) in 5 s.
        timeout: waitMs <= 0 ? FIRST_CONNECT_TIMEOUT_MS : 20_000,
        reconnect,
        maxReconnectAttempts: reconnect ? -1 : 0,
        // No stack captured up front for every request (it cost ~8% of the CPU under load); a failed request
        // still rejects with the same error classes, and callers add the context that matters.
        noAsyncTraces: true,
      });
    if (opts.signal?.aborted) throw connectAborted(servers, opts.signal);
    try {
      connection =
        waitMs <= 0
          ? await attempt()
          : await untilAborted(
              pRetry(attempt, {
                retries: Number.POSITIVE_INFINITY,
                maxRetryTime: waitMs,
                minTimeout: 250,
                factor: 2,
                maxTimeout: 5_000,
                // Refused credentials or a bad URL will not get better by waiting.
                shouldRetry: ({ error }) =>
                  !['AuthorizationError', 'InvalidArgumentError', 'TypeError'].includes(error.name),
                onFailedAttempt: ({ error, attemptNumber }) =>
                  opts.logger.warn(
                    { servers, attempt: attemptNumber, err: error },
                    `cannot reach NATS at ${servers.join(', ')} yet (${error.message}); trying again`,
                  ),
                ...(opts.signal ? { signal: opts.signal } : {}),
              }),
              opts.signal,
              servers,
            );
    } catch (cause) {
      if (TransportError.is(cause, 'aborted')) throw cause;
      const timedOut = (cause as Error | undefined)?.name === 'TimeoutError';
      throw new TransportError(
        'connect_failed',
        `cannot connect to NATS at ${servers.join(', ')}: ${errorMessage(cause)}. ` +
          (timedOut && opts.access?.tls
            ? 'The TLS handshake or the login did not complete: a server that verifies clients needs a client certificate its CA signed (--tls-cert and --tls-key, or NATS_CERT and NATS_KEY).'
            : 'Check that nats-server (with JetStream, -js) is running there; `troupe up` without NATS_URL starts one.'),
        { cause },
      );
    }
    opts.logger.info(
      { server: connection.getServer(), client: opts.name },
      `connected to NATS at ${connection.getServer()}`,
    );
    return new NatsBus(connection, opts);
  }

  /** The server this connection is on now, e.g. `127.0.0.1:4222`. */
  get server(): string {
    return this.connection.getServer();
  }

  /** The level message lines are logged at. */
  get messageLogLevel(): MessageLogLevel {
    return this.#level;
  }

  /** Publishes a JSON payload and logs one `out` line (a reply's says who answers whom: see {@link replyMeta}). */
  publish(subject: string, payload: unknown, meta?: MessageMeta, headers?: Record<string, string>): void {
    const options = headers === undefined ? undefined : { headers: toMsgHdrs(headers) };
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
   * and is sent again after a lost connection (see {@link EventOutbox}). Fails with `closed` once the bus is.
   * The promise (which never rejects) says whether the event was stored; most callers need not wait for it.
   */
  publishEvent(event: TroupeEvent): Promise<boolean> {
    const subject = subjects.event(event.pipeline, event.taskId, event.kind);
    if (this.connection.isClosed() || this.connection.isDraining() || this.#events.stopped) {
      throw new TransportError('closed', `cannot send on ${subject}: the NATS connection is closed`);
    }
    const meta: MessageMeta = { taskId: event.taskId, kind: event.kind };
    if (event.from !== undefined) meta.from = event.from;
    if (event.to !== undefined) meta.to = event.to;
    const stored = this.#events.add({
      id: event.id,
      subject,
      data: JSON.stringify(event),
      headers: { traceparent: event.traceparent },
    });
    logMessage(this.logger, this.#level, 'out', subject, meta);
    for (const listener of this.#eventListeners) {
      // A listener (metrics) must never cost an event.
      try {
        listener(event);
      } catch (error) {
        this.logger.warn({ err: error, kind: event.kind }, 'an event listener failed; the event goes on');
      }
    }
    return stored;
  }

  /** Calls `listener` with each event this bus publishes (as it is handed to the outbox); returns how to stop. */
  onEventPublished(listener: (event: TroupeEvent) => void): () => void {
    this.#eventListeners.add(listener);
    return () => this.#eventListeners.delete(listener);
  }

  /** Events published but not yet stored by the `EVENTS` stream (or, without a stream, not yet sent). */
  get pendingEvents(): number {
    return this.#events.size;
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
    const inflight = new Set<Promise<void>>();
    const track = (work: Promise<void>): void => {
      inflight.add(work);
      void work.finally(() => inflight.delete(work));
    };
    const sub = this.connection.subscribe(subject, {
      ...(opts.queue === undefined ? {} : { queue: opts.queue }),
      callback: (error, msg) => {
        if (error) {
          this.logger.error({ err: error, subject }, `subscription to ${subject} failed: ${error.message}`);
          return;
        }
        const work = this.#deliver(msg, schema, handler, opts);
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
  async request<S extends z.ZodType>(
    subject: string,
    payload: unknown,
    replySchema: S,
    opts: RequestOptions,
  ): Promise<z.infer<S>> {
    if (opts.signal?.aborted) throw abortedError(subject);
    const meta = opts.meta ?? metaFromSubject(subject);
    const data = JSON.stringify(payload);
    const pending = this.connection.request(subject, data, {
      timeout: opts.timeoutMs,
      ...(opts.headers === undefined ? {} : { headers: toMsgHdrs(opts.headers) }),
    });
    logMessage(this.logger, this.#level, 'out', subject, meta);
    let reply: Msg;
    try {
      reply = await abortable(pending, subject, opts.signal);
    } catch (error) {
      throw requestError(error, subject, opts.timeoutMs);
    }
    logMessage(this.logger, this.#level, 'in', reply.subject, replyMeta(meta));
    const parsed = parseMessage(replySchema, reply.data);
    if (parsed.ok) return parsed.value;
    const refusal = parseMessage(ErrorReply, reply.data);
    if (refusal.ok) throw TransportError.fromReply(refusal.value);
    throw new TransportError('invalid_reply', `the reply from ${subject} is not valid: ${parsed.reason}`);
  }

  requestReplies(subject: string, payload: unknown, onReply: (reply: ReplyMessage) => void): () => void {
    // Under this client's own prefix, which its NATS user may be allowed to read alone, in `.steps.` (where agent
    // hosts may answer, while the rest of the prefix takes only the server's replies), and random: a host that may
    // answer one agent's steps cannot guess where another's go (nats.js's inbox ids count up).
    const inbox = `${this.access?.inboxPrefix ?? subjects.inboxPrefix}.${STEP_INBOXES}.${randomBytes(16).toString('hex')}`;
    const subscription = this.connection.subscribe(inbox, {
      callback: (error, msg) => {
        if (error) {
          const failure = `request to ${subject} failed: ${error.message}`;
          onReply({ ok: false, error: new TransportError('request_failed', failure, { cause: error }) });
        } else if (msg.headers?.code === 503) {
          onReply({ ok: false, error: new TransportError('no_responders', `no one is serving ${subject}`) });
        } else
          onReply({
            ok: true,
            subject: msg.subject,
            data: msg.data,
            ...(msg.reply ? { reply: msg.reply } : {}),
          });
      },
    });
    try {
      this.connection.publish(subject, JSON.stringify(payload), { reply: inbox });
    } catch (error) {
      subscription.unsubscribe();
      throw (
        asClosedError(error, subject) ??
        new TransportError('request_failed', `cannot send on ${subject}: ${errorMessage(error)}`, {
          cause: error,
        })
      );
    }
    return () => subscription.unsubscribe();
  }

  acknowledge(reply: string, meta?: MessageMeta): void {
    try {
      this.connection.publish(reply, '{}');
    } catch {
      // Closing: the sender takes the silence for what it is once the connection is back, or not at all.
      return;
    }
    logMessage(this.logger, 'trace', 'out', reply, meta ?? metaFromSubject(reply));
  }

  /**
   * Sends a progress message (a step heartbeat) to a subject someone is expected to listen on, such as a
   * requester's reply inbox: `gone` when the server says nobody listens there any more, `answered` when the
   * listener acknowledged it (workflows do), else `unanswered` (a timeout, or a lost connection).
   * Logged at trace level, being frequent.
   */
  async stillListening(
    subject: string,
    payload: unknown,
    timeoutMs: number,
    meta?: MessageMeta,
  ): Promise<Listening> {
    logMessage(this.logger, 'trace', 'out', subject, meta ?? metaFromSubject(subject));
    try {
      await this.connection.request(subject, JSON.stringify(payload), { timeout: timeoutMs });
    } catch (error) {
      return error instanceof RequestError && error.isNoResponders() ? 'gone' : 'unanswered';
    }
    return 'answered';
  }

  /** Whether the connection is up now: false while it is lost and being made again. */
  get reachable(): boolean {
    return this.#reachable && !this.connection.isClosed();
  }

  /** Aborted once the bus starts to drain or close, so that a wait on NATS need not outlive it. */
  get closing(): AbortSignal {
    return this.#closing.signal;
  }

  /** Resolves once the server has seen everything published so far. */
  flush(): Promise<void> {
    return this.connection.flush();
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
    const subscriptions = [...this.#subscriptions];
    // A subscription's drain is a round trip to the server, which a lost connection never completes.
    if (this.reachable) {
      await withTimeout(Promise.allSettled(subscriptions.map(({ sub }) => sub.drain())), left());
    }
    for (const { sub } of subscriptions) if (!sub.isClosed()) sub.unsubscribe();
    const handlersDone = Promise.allSettled(subscriptions.map(({ settled }) => settled()));
    if ((await withTimeout(handlersDone, left())) === 'timeout') {
      this.logger.warn(
        { timeoutMs },
        'handlers still running at the end of the drain; closing the connection anyway',
      );
    }
    // Events wait for the server only while it answers: a caller that would wait for a lost one does so before.
    const unstored = this.reachable ? await this.#events.settle(left()) : this.#events.size;
    this.#events.stop();
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
    const abandoned = this.#events.stopped ? 0 : this.#events.stop();
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

  /** Calls `listener` on every connection status change (disconnect, reconnect, errors, …); returns how to stop. */
  onStatus(listener: StatusListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  #deliver<S extends z.ZodType>(
    msg: Msg,
    schema: S,
    handler: (delivery: Delivery<z.infer<S>>) => void | Promise<void>,
    opts: SubscribeOptions<z.infer<S>>,
  ): Promise<void> | undefined {
    const parsed: ParseResult<z.infer<S>> =
      (schema as z.ZodType) === TEXT
        ? (decodeText(msg.data) as ParseResult<z.infer<S>>)
        : parseMessage(schema, msg.data);
    // A refused message's one line is the warning that says why.
    if (!parsed.ok) {
      this.#rejectInvalid(msg, parsed, opts.reporter ?? this.name);
      return undefined;
    }
    const { subject } = msg;
    const reply = replyOf(msg);
    const meta = this.#metaOf(subject, parsed.value, opts.meta);
    logMessage(this.logger, opts.messageLogLevel ?? this.#level, 'in', subject, meta);
    // The closures below hold the subject and reply as strings, never `msg`: a message's bytes are a view into the
    // socket's read buffer, so a handler that keeps `respond` (a step in flight does, for as long as it runs) would
    // keep that whole buffer, up to 64 KiB shared with other messages, alive.
    const answerMeta = () => replyMeta(meta, opts.reporter);
    const delivery: Delivery<z.infer<S>> = {
      subject,
      value: parsed.value,
      respond: (payload) => this.#respond(subject, reply, payload, answerMeta()),
    };
    if (reply !== undefined) delivery.reply = reply;
    const headers = fromMsgHdrs(msg.headers);
    if (headers !== undefined) delivery.headers = headers;
    try {
      const result = handler(delivery);
      if (result instanceof Promise)
        return result.catch((error: unknown) =>
          this.#handlerFailed(subject, reply, error, meta, answerMeta()),
        );
    } catch (error) {
      this.#handlerFailed(subject, reply, error, meta, answerMeta());
    }
    return undefined;
  }

  #metaOf<T>(subject: string, value: T, custom: ((value: T) => MessageMeta) | undefined): MessageMeta {
    if (custom === undefined) return { ...metaFromSubject(subject), ...metaFromValue(value) };
    try {
      return custom(value);
    } catch (error) {
      this.logger.warn({ err: error, subject }, `meta function for ${subject} threw; logging without it`);
      return metaFromSubject(subject);
    }
  }

  #rejectInvalid(msg: Msg, parsed: Extract<ParseResult<unknown>, { ok: false }>, reporter: string): void {
    const { reason, issues } = parsed;
    // Reports pass every `troupe.events.>` subscriber; one that expects events must not report a report.
    const reply = replyOf(msg);
    const meta = metaFromSubject(msg.subject);
    if (msg.subject === subjects.invalid && reply === undefined) {
      this.logger.debug(
        messageLogFields('in', msg.subject, meta),
        'ignored an invalid-message report that does not match this schema',
      );
      return;
    }
    logRefusedMessage(this.logger, msg.subject, reason, {
      meta,
      message: `invalid message on ${msg.subject}: ${reason}`,
      fields: { reporter, issues },
    });
    if (reply !== undefined) {
      const answer: ErrorReply = { ok: false, error: { code: 'invalid_message', message: reason } };
      this.#respond(msg.subject, reply, answer, replyMeta(meta, reporter));
      return;
    }
    this.reportInvalid({
      subject: msg.subject,
      reporter,
      reason,
      issues,
      payload: lenientDecoder.decode(msg.data).slice(0, PAYLOAD_EXCERPT),
      ...idsFromSubject(msg.subject),
    });
  }

  #handlerFailed(
    subject: string,
    reply: string | undefined,
    error: unknown,
    meta: MessageMeta,
    answerMeta: MessageMeta,
  ): void {
    const message = `handler for ${subject} failed: ${errorMessage(error)}`;
    this.logger.error({ err: error, subject, ...meta }, message);
    if (reply === undefined) return;
    const answer: ErrorReply = { ok: false, error: { code: 'handler_failed', message } };
    this.#respond(subject, reply, answer, answerMeta);
  }

  // A failed reply is the requester's timeout to handle; it must not take down the handler's caller.
  #respond(subject: string, reply: string | undefined, payload: unknown, meta: MessageMeta): void {
    if (reply === undefined) {
      this.logger.debug({ subject }, `no reply was asked for on ${subject}; response dropped`);
      return;
    }
    try {
      this.publish(reply, payload, meta);
    } catch (error) {
      this.logger.warn({ err: error, subject }, `could not reply on ${subject}: ${errorMessage(error)}`);
    }
  }

  async #watchStatus(): Promise<void> {
    try {
      for await (const status of this.connection.status()) {
        const { type, ...data } = status;
        const log = statusLogs[type] ?? statusLogs.default;
        log?.(this.logger, data);
        if (type === 'disconnect') this.#reachable = false;
        else if (type === 'reconnect') this.#reachable = true;
        else if (type === 'close') this.#closing.abort(closedError('the NATS connection is closed'));
        this.#events.connectionChanged(type);
        // Over a copy: a listener added while a change is told (a step call's next send) does not hear that change.
        for (const listener of [...this.#listeners]) {
          try {
            listener({ type, data });
          } catch (error) {
            this.logger.warn({ err: error }, 'a status listener threw');
          }
        }
      }
    } catch (error) {
      this.logger.warn({ err: error }, 'stopped watching the NATS connection status');
    }
  }
}

const statusLogs: Record<string, (logger: Logger, data: Record<string, unknown>) => void> = {
  disconnect: (logger, data) => logger.warn(data, `disconnected from NATS at ${String(data.server)}`),
  reconnecting: (logger) => logger.debug('reconnecting to NATS'),
  reconnect: (logger, data) => logger.info(data, `reconnected to NATS at ${String(data.server)}`),
  error: (logger, data) =>
    logger.error({ err: data.error }, `NATS connection error: ${errorMessage(data.error)}`),
  ldm: (logger, data) => logger.warn(data, `NATS server ${String(data.server)} is entering lame duck mode`),
  staleConnection: (logger) => logger.warn('NATS connection is stale; reconnecting'),
  slowConsumer: (logger, data) =>
    logger.warn({ pending: data.pending }, 'a subscription is falling behind (slow consumer)'),
  close: (logger) => logger.debug('NATS connection closed'),
  ping: () => {},
  default: (logger, data) => logger.debug(data, 'NATS connection status'),
};

/** The subject the sender waits on; nats.js gives an empty string when there is none. */
function replyOf(msg: Msg): string | undefined {
  if (msg.reply === undefined || msg.reply === '') return undefined;
  // An event's reply subject is where its publisher awaits JetStream's ack: no question for subscribers.
  if (msg.subject.startsWith(EVENTS_PREFIX)) return undefined;
  return msg.reply;
}

const EVENTS_PREFIX = `${ROOT}.events.`;

/** What a subject alone says about its message. */
function metaFromSubject(subject: string): MessageMeta {
  const parsed = parseSubject(subject);
  if (parsed === undefined) return {};
  const meta: MessageMeta = {};
  if ('taskId' in parsed) meta.taskId = parsed.taskId;
  if (parsed.type === 'event') meta.kind = parsed.kind;
  if (parsed.type === 'agent') meta.to = parsed.agent;
  if (parsed.type === 'session-summary') {
    meta.to = parsed.agent;
    meta.kind = 'session.summarize';
  }
  if (parsed.type === 'control') meta.kind = 'control';
  return meta;
}

const META_KEYS = ['taskId', 'from', 'to', 'kind'] as const;

/** The `taskId`, `from`, `to` and `kind` a payload carries, when they are strings. */
function metaFromValue(value: unknown): MessageMeta {
  if (typeof value !== 'object' || value === null) return {};
  const meta: MessageMeta = {};
  for (const key of META_KEYS) {
    const field = (value as Record<string, unknown>)[key];
    if (typeof field === 'string') meta[key] = field;
  }
  return meta;
}

function idsFromSubject(subject: string): { pipeline?: string; taskId?: string } {
  const parsed = parseSubject(subject);
  const ids: { pipeline?: string; taskId?: string } = {};
  if (parsed !== undefined && 'pipeline' in parsed) ids.pipeline = parsed.pipeline;
  if (parsed !== undefined && 'taskId' in parsed) ids.taskId = parsed.taskId;
  return ids;
}

function toMsgHdrs(record: Record<string, string>): MsgHdrs {
  const hdrs = createHeaders();
  for (const [key, value] of Object.entries(record)) hdrs.set(key, value);
  return hdrs;
}

function fromMsgHdrs(hdrs: MsgHdrs | undefined): Record<string, string> | undefined {
  if (hdrs === undefined) return undefined;
  const record: Record<string, string> = {};
  for (const [key, values] of hdrs) {
    const last = values.at(-1);
    if (last !== undefined) record[key] = last;
  }
  return record;
}

function requestError(error: unknown, subject: string, timeoutMs: number): unknown {
  if (error instanceof TransportError) return error;
  if (error instanceof RequestError && error.isNoResponders()) {
    return new TransportError('no_responders', `no one is serving ${subject}`, { cause: error });
  }
  if (error instanceof TimeoutError) {
    return new TransportError('timeout', `no reply from ${subject} within ${timeoutMs} ms`, { cause: error });
  }
  return (
    asClosedError(error, subject) ??
    new TransportError('request_failed', `request to ${subject} failed: ${errorMessage(error)}`, {
      cause: error,
    })
  );
}

function asClosedError(error: unknown, subject: string): TransportError | undefined {
  if (error instanceof ClosedConnectionError || error instanceof DrainingConnectionError) {
    return new TransportError(
      'closed',
      `cannot send on ${subject}: the NATS connection is ${error.message}`,
      {
        cause: error,
      },
    );
  }
  return undefined;
}

function closedError(why: string): TransportError {
  return new TransportError('closed', why);
}

function connectAborted(servers: readonly string[], signal: AbortSignal): TransportError {
  return new TransportError('aborted', `stopped while waiting for NATS at ${servers.join(', ')}`, {
    cause: signal.reason,
  });
}

/**
 * The connection `connecting` makes, or `aborted` as soon as `signal` is: an attempt under way may take its whole
 * handshake timeout, which a stop does not wait for (a connection it makes later is closed at once).
 */
function untilAborted(
  connecting: Promise<NatsConnection>,
  signal: AbortSignal | undefined,
  servers: readonly string[],
): Promise<NatsConnection> {
  if (signal === undefined) return connecting;
  return new Promise<NatsConnection>((resolve, reject) => {
    const onAbort = (): void => {
      reject(connectAborted(servers, signal));
      void connecting.then((late) => late.close()).catch(() => undefined);
    };
    signal.addEventListener('abort', onAbort, { once: true });
    connecting.then(
      (connection) => {
        signal.removeEventListener('abort', onAbort);
        resolve(connection);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(signal.aborted ? connectAborted(servers, signal) : error);
      },
    );
  });
}

function abortedError(subject: string): TransportError {
  return new TransportError('aborted', `request to ${subject} was aborted`);
}

function abortable<T>(pending: Promise<T>, subject: string, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return pending;
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(abortedError(subject));
    signal.addEventListener('abort', onAbort, { once: true });
    pending.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}
