import type { InvalidMessageEvent, TroupeEvent } from '@troupe/protocol';
import type { z } from 'zod';
import type { Logger } from '../logging/logger.ts';
import type { MessageLogLevel, MessageMeta } from '../logging/messageLog.ts';
import type { NatsAccess } from './natsAccess.ts';
import type { TransportError } from './transportError.ts';

/** A validated message handed to a subscriber. */
export interface Delivery<T> {
  subject: string;
  value: T;
  /** Where the sender waits for an answer, when it asked for one. */
  reply?: string;
  headers?: Record<string, string>;
  /** Answers the sender with a JSON payload; does nothing when no reply was asked for. */
  respond(payload: unknown): void;
}

export interface BusSubscription {
  unsubscribe(): void;
  /** Settles once the subscription has closed and the handlers it started have finished. */
  closed: Promise<void>;
}

export interface SubscribeOptions<T> {
  /** Queue group: each message goes to one member of the group. */
  queue?: string;
  /** Who reports invalid messages, e.g. `coordinator`, `agent:executor`; default the bus's client name. */
  reporter?: string;
  /** What the log line of a valid message says besides its subject; by default read from the subject and payload. */
  meta?: (value: T) => MessageMeta;
  /**
   * Level of the `in` line of each valid message; default the bus's. A watcher of messages that another subscriber
   * logs (the intake guard, beside the task's runner) takes `debug`.
   */
  messageLogLevel?: MessageLogLevel;
}

export interface RequestOptions {
  timeoutMs: number;
  signal?: AbortSignal;
  meta?: MessageMeta;
  headers?: Record<string, string>;
}

export type StatusListener = (status: { type: string; data?: unknown }) => void;

/**
 * One message answering a request sent with {@link Bus.requestReplies}: a payload, or a failure of the request
 * itself (`no_responders` when nobody listens on the subject, `request_failed` when the subscription broke).
 */
export type ReplyMessage =
  /** `reply`: where the answer's sender asked to be answered (a heartbeat's sender, to learn its requester is there). */
  { ok: true; subject: string; data: Uint8Array; reply?: string } | { ok: false; error: TransportError };

/**
 * What a progress message found: `answered` (its listener acknowledged it), `unanswered` (no answer in time: a
 * listener that never acknowledges, or one that stopped), `gone` (the server said nobody listens).
 */
export type Listening = 'answered' | 'unanswered' | 'gone';

/**
 * What every part of Troupe that sends or receives messages depends on: JSON messages validated by protocol
 * schemas, queue groups, request/reply, headers, events, connection status. {@link NatsBus} is the implementation
 * over NATS; `MemoryBus` in `@troupe/testkit` is an in-process one for unit tests of the parts that use it.
 *
 * Every implementation keeps the same promises: a message that does not match its subscription's schema never
 * reaches the handler (it is answered with an `ErrorReply` when a reply was asked for, else reported on
 * `troupe.events._invalid`); a handler that throws is answered with `handler_failed` and ends nothing; requests
 * fail with a {@link TransportError} (`no_responders`, `timeout`, `aborted`, `invalid_reply`, `closed`, or the code
 * of the responder's `ErrorReply`).
 */
export interface Bus {
  /** The client name, e.g. `troupe-coordinator`; the default reporter of invalid messages. */
  readonly name: string;
  /** The logger message lines and transport warnings go to. */
  readonly logger: Logger;
  /** The level message lines are logged at. */
  readonly messageLogLevel: MessageLogLevel;
  /** Events published but not yet stored by the `EVENTS` stream. */
  readonly pendingEvents: number;
  /** Publishes a JSON payload; fails with `closed` once the bus is closed. */
  publish(subject: string, payload: unknown, meta?: MessageMeta, headers?: Record<string, string>): void;
  /**
   * Publishes an event on its subject, to be stored by the `EVENTS` stream. Returns at once; the promise (which
   * never rejects) says whether the event was stored. Fails with `closed` once the bus is.
   */
  publishEvent(event: TroupeEvent): Promise<boolean>;
  /**
   * Sends the task's events still gathering in a batch (see `BusOptions.eventBatch`) now, without waiting for them to
   * be stored, so that what this bus sends next reaches the server after them: a coordinator calls it before each
   * write of the task's record. Absent, or nothing to do, where events are not batched (an in-process bus).
   */
  sendOpenEvents?(pipeline: string, taskId: string): void;
  /** Publishes a `message.invalid` report on `troupe.events._invalid`. */
  reportInvalid(report: Omit<InvalidMessageEvent, 'id' | 'ts' | 'kind'>): void;
  /** Delivers each message on `subject` (NATS wildcards allowed) that matches `schema` to `handler`. */
  subscribe<S extends z.ZodType>(
    subject: string,
    schema: S,
    handler: (delivery: Delivery<z.infer<S>>) => void | Promise<void>,
    opts?: SubscribeOptions<z.infer<S>>,
  ): BusSubscription;
  /** Delivers every message as text, unvalidated (see {@link NatsBus.subscribeText}). */
  subscribeText(
    subject: string,
    handler: (delivery: Delivery<string>) => void | Promise<void>,
    opts?: SubscribeOptions<string>,
  ): BusSubscription;
  /** Sends a request and returns its validated reply. */
  request<S extends z.ZodType>(
    subject: string,
    payload: unknown,
    replySchema: S,
    opts: RequestOptions,
  ): Promise<z.infer<S>>;
  /**
   * Sends a request whose responder may answer more than once (heartbeats, then a reply): each answer reaches
   * `onReply`, unvalidated, until the returned function is called. Fails at once with `closed` or
   * `request_failed` when the request cannot be sent.
   */
  requestReplies(subject: string, payload: unknown, onReply: (reply: ReplyMessage) => void): () => void;
  /** Acknowledges a progress message (a heartbeat) at the subject its sender gave; logged at trace level, as it. */
  acknowledge(reply: string, meta?: MessageMeta): void;
  /** Sends a progress message to a subject someone is expected to listen on (a requester's inbox): what it found. */
  stillListening(
    subject: string,
    payload: unknown,
    timeoutMs: number,
    meta?: MessageMeta,
  ): Promise<Listening>;
  /** Resolves once everything published so far has reached the server. */
  flush(): Promise<void>;
  /** Calls `listener` on every connection status change (`disconnect`, `reconnect`, …); returns how to stop. */
  onStatus(listener: StatusListener): () => void;
  /** Stops taking messages, lets running handlers finish and pending events be stored, then closes. */
  drain(timeoutMs?: number): Promise<void>;
  /** Closes at once. */
  close(): Promise<void>;
}

/**
 * A {@link Bus} on a NATS server with JetStream: what the runtime's streams, KV buckets, object stores and second
 * connections (see `ThreadedHeartbeatSender`) need besides messages. An app holds one and hands it to them
 * (`KvStore.open(bus, …)`, `openStreamReader(bus, …)`, `publishToStream(bus, …)`): the nats.js connection under it
 * is not part of this interface, and only the runtime's own modules reach it.
 * {@link NatsBus} is the implementation.
 */
export interface JetStreamBus extends Bus {
  /** The server this connection is on now, e.g. `127.0.0.1:4222`, for messages that name it. */
  readonly server: string;
  /** The servers it was told to connect to, for a second connection to the same place. */
  readonly servers: readonly string[];
  /** How it logged in, for a second connection made the same way. */
  readonly access: NatsAccess | undefined;
  /** Whether the connection is up now: false while it is lost and being made again. */
  readonly reachable: boolean;
  /** Aborted once the bus starts to drain or close, so that a wait on NATS need not outlive it. */
  readonly closing: AbortSignal;
  /** Calls `listener` with each event this bus publishes; returns how to stop. */
  onEventPublished(listener: (event: TroupeEvent) => void): () => void;
}
