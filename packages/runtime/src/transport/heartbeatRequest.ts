import { decodeMessage, ErrorReply, validateMessage } from '@troupe/protocol';
import type { z } from 'zod';
import { type Clock, systemClock } from '../events/clock.ts';
import { logMessage, type MessageLogLevel, type MessageMeta, replyMeta } from '../logging/messageLog.ts';
import { withTimeout } from '../withTimeout.ts';
import type { Bus, ReplyMessage } from './bus.ts';
import { RequestTimers, type TimedRequest } from './requestTimers.ts';
import { TransportError } from './transportError.ts';

/**
 * What can hold a request's timeout: while `held`, the time it waits is not counted against `timeoutMs`. A task's
 * steering is one (a paused task's step waits on a person without running out of time).
 */
export interface TimeoutHold {
  readonly held: boolean;
  /** Calls `listener` with each change of `held` until the returned function is called. */
  listen(listener: (held: boolean) => void): () => void;
}

export interface HeartbeatRequestOptions {
  /** How long to wait for the final reply in all, less the time held (see `hold`). */
  timeoutMs: number;
  /**
   * While it is held, `timeoutMs` stops running; let go, the request has the time it had left, not all of it anew.
   * Heartbeats are still awaited while held (`idleMs`): a responder that died fails the request as `stalled`.
   */
  hold?: TimeoutHold;
  /** Fail with `stalled` when neither a heartbeat nor the reply came for this long. */
  idleMs: number;
  signal?: AbortSignal;
  meta?: MessageMeta;
  /** Told of each heartbeat, e.g. to learn what the responder waits on. */
  onHeartbeat?: (heartbeat: unknown) => void;
  /** Level of the line logged for the request; the bus's message level by default (a resend may log quieter). */
  logLevel?: MessageLogLevel;
  /** Time for the timeouts; the system's by default. */
  clock?: Clock;
}

/** What a request started with {@link startHeartbeatRequest} is given besides its subject and payload. */
export interface StartHeartbeatRequestOptions
  extends Pick<HeartbeatRequestOptions, 'timeoutMs' | 'idleMs' | 'meta' | 'logLevel' | 'clock'> {
  /** Held from the start (see {@link HeartbeatRequest.hold}). */
  held?: boolean | undefined;
}

/** Who hears a request started with {@link startHeartbeatRequest}: its heartbeats, then its reply or its failure. */
export interface HeartbeatRequestListener<T> {
  /** A heartbeat, valid by the request's heartbeat schema. */
  heartbeat(heartbeat: unknown): void;
  /** The validated final reply; nothing is heard after it. */
  replied(reply: T): void;
  /** The request failed (see {@link requestWithHeartbeats} for the codes); nothing is heard after it. */
  failed(error: TransportError): void;
}

/** A request in flight, as its sender steers it. */
export interface HeartbeatRequest {
  /**
   * Holds its timeout (`true`) or lets it go (`false`): while held, `timeoutMs` stops running, and let go, the
   * request has the time it had left. Heartbeats are still awaited while held (`idleMs`).
   */
  hold(held: boolean): void;
  /** Stops waiting, its inbox closed (a heartbeat there is answered "no responders"); its listener hears nothing more. */
  cancel(): void;
}

/**
 * Sends a request whose responder sends heartbeats to the reply subject while it works, and returns the
 * validated final reply. Fails with a {@link TransportError}: `no_responders`, `timeout`, `stalled` (the
 * responder went silent: its process died or lost its connection), `aborted`, `invalid_reply`, or the code of
 * an `ErrorReply`.
 */
export function requestWithHeartbeats<S extends z.ZodType, H extends z.ZodType>(
  bus: Bus,
  subject: string,
  payload: unknown,
  replySchema: S,
  heartbeatSchema: H,
  options: HeartbeatRequestOptions,
): Promise<z.infer<S>> {
  const { signal, hold } = options;
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(new TransportError('aborted', `request to ${subject} was aborted`));
      return;
    }
    let settled = false;
    let unhold: (() => void) | undefined;
    const settle = () => {
      settled = true;
      unhold?.();
      signal?.removeEventListener('abort', onAbort);
    };
    const onAbort = () => {
      request.cancel();
      settle();
      reject(new TransportError('aborted', `request to ${subject} was aborted`));
    };
    const request = startHeartbeatRequest(
      bus,
      subject,
      payload,
      replySchema,
      heartbeatSchema,
      { ...options, held: hold?.held },
      {
        heartbeat: (heartbeat) => options.onHeartbeat?.(heartbeat),
        replied: (reply) => {
          settle();
          resolve(reply);
        },
        failed: (error) => {
          settle();
          reject(error);
        },
      },
    );
    if (settled) return;
    unhold = hold?.listen((held) => request.hold(held));
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Sends a request as {@link requestWithHeartbeats} does, for a sender that keeps many waiting (a coordinator's step
 * calls, one a parked task): its heartbeats and its end go to `listener`, and what it keeps while it waits is one
 * object, woken for its timeout and its heartbeat watch both by one timer its clock's requests share. The returned
 * request is held and cancelled by calls, not through an `AbortSignal` and a `TimeoutHold` listener of its own.
 */
export function startHeartbeatRequest<S extends z.ZodType, H extends z.ZodType>(
  bus: Bus,
  subject: string,
  payload: unknown,
  replySchema: S,
  heartbeatSchema: H,
  options: StartHeartbeatRequestOptions,
  listener: HeartbeatRequestListener<z.infer<S>>,
): HeartbeatRequest {
  const request = new HeartbeatWait(bus, subject, replySchema, heartbeatSchema, options, listener);
  request.send(payload, options.logLevel);
  return request;
}

/**
 * A request waiting for its reply. It is woken (by its clock's {@link RequestTimers}) at the sooner of its two limits:
 * the timeout (which stops while held) and the silence allowed (`idleMs` past the last heartbeat); a heartbeat only
 * notes its time, and a wake that comes early asks for the next.
 */
class HeartbeatWait<S extends z.ZodType, H extends z.ZodType> implements HeartbeatRequest, TimedRequest {
  readonly #bus: Bus;
  readonly #subject: string;
  readonly #replySchema: S;
  readonly #heartbeatSchema: H;
  readonly #listener: HeartbeatRequestListener<z.infer<S>>;
  readonly #clock: Clock;
  readonly #meta: MessageMeta;
  readonly #timeoutMs: number;
  readonly #idleMs: number;
  /** The timeout's time left at `#armedAt` (all of it while held). */
  #left: number;
  #armedAt: number;
  #held: boolean;
  #lastHeard: number;
  /** Silent past the limit, it makes a round trip to the server before it says so (see `#suspect`). */
  #suspecting = false;
  #done = false;
  /** Within `send`: an end then is told its listener in a microtask, once `send` has returned. */
  #sending = false;
  readonly #timers: RequestTimers;
  /** @internal When its timers wake it (see {@link TimedRequest}). */
  at = Number.POSITIVE_INFINITY;
  /** @internal */
  slot = -1;
  /** @internal See {@link TimedRequest}. */
  order = 0;
  #stop: (() => void) | undefined;

  constructor(
    bus: Bus,
    subject: string,
    replySchema: S,
    heartbeatSchema: H,
    options: StartHeartbeatRequestOptions,
    listener: HeartbeatRequestListener<z.infer<S>>,
  ) {
    this.#bus = bus;
    this.#subject = subject;
    this.#replySchema = replySchema;
    this.#heartbeatSchema = heartbeatSchema;
    this.#listener = listener;
    this.#clock = options.clock ?? systemClock;
    this.#timers = RequestTimers.of(this.#clock);
    this.#meta = options.meta ?? {};
    this.#timeoutMs = options.timeoutMs;
    this.#idleMs = options.idleMs;
    this.#left = options.timeoutMs;
    this.#held = options.held === true;
    this.#armedAt = this.#clock.now();
    this.#lastHeard = this.#armedAt;
  }

  /** Sends it; the payload is let go once sent (a step's request, with the outputs it carries). */
  send(payload: unknown, logLevel: MessageLogLevel | undefined): void {
    this.#arm();
    this.#sending = true;
    try {
      this.#stop = this.#bus.requestReplies(this.#subject, payload, (reply) => this.#heard(reply));
    } catch (error) {
      this.#finish(
        TransportError.is(error)
          ? error
          : new TransportError(
              'request_failed',
              `cannot send on ${this.#subject}: ${(error as Error).message}`,
              { cause: error },
            ),
      );
      return;
    } finally {
      this.#sending = false;
    }
    // A reply may have come before requestReplies returned (an in-memory bus answers at once).
    if (this.#done) this.#stop();
    logMessage(this.#bus.logger, logLevel ?? this.#bus.messageLogLevel, 'out', this.#subject, this.#meta);
  }

  hold(held: boolean): void {
    if (this.#done || held === this.#held) return;
    const now = this.#clock.now();
    this.#held = held;
    if (held) this.#left = Math.max(0, this.#left - (now - this.#armedAt));
    else {
      this.#armedAt = now;
      this.#arm();
    }
  }

  cancel(): void {
    this.#end();
  }

  #heard(reply: ReplyMessage): void {
    if (this.#done) return;
    if (!reply.ok) {
      this.#finish(reply.error);
      return;
    }
    // Decoded once; a heartbeat says so (`heartbeat: true`), and only then is it checked as one.
    const decoded = decodeMessage(reply.data);
    const json = decoded.ok ? decoded.value : undefined;
    if ((json as { heartbeat?: unknown } | undefined)?.heartbeat === true) {
      const heartbeat = validateMessage(this.#heartbeatSchema, json);
      if (heartbeat.ok) {
        const heartbeatMeta: MessageMeta = { ...replyMeta(this.#meta), kind: 'step.heartbeat' };
        logMessage(this.#bus.logger, 'trace', 'in', reply.subject, heartbeatMeta);
        // Its sender learns this request still waits: across NATS accounts, silence is all it would hear else.
        if (reply.reply !== undefined) this.#bus.acknowledge(reply.reply, heartbeatMeta);
        this.#lastHeard = this.#clock.now();
        this.#listener.heartbeat(heartbeat.value);
        return;
      }
    }
    logMessage(this.#bus.logger, this.#bus.messageLogLevel, 'in', reply.subject, replyMeta(this.#meta));
    const parsed = decoded.ok ? validateMessage(this.#replySchema, json) : decoded;
    if (parsed.ok) {
      this.#finish(undefined, parsed.value);
      return;
    }
    const refusal = decoded.ok ? validateMessage(ErrorReply, json) : decoded;
    this.#finish(
      refusal.ok
        ? TransportError.fromReply(refusal.value)
        : new TransportError(
            'invalid_reply',
            `the reply from ${this.#subject} is not valid: ${parsed.reason}`,
          ),
    );
  }

  /** Asks to be woken at the sooner limit, unless it is to be woken sooner already (it asks for the next then). */
  #arm(): void {
    const timeoutAt = this.#held ? Number.POSITIVE_INFINITY : this.#armedAt + this.#left;
    const silentAt = this.#suspecting ? Number.POSITIVE_INFINITY : this.#lastHeard + this.#idleMs;
    const at = Math.min(timeoutAt, silentAt);
    if (this.#done || at >= this.at) return;
    this.#timers.set(this, at);
  }

  /** @internal Woken by its timers: past a limit, or early for one, as a hold or a heartbeat moved it on. */
  due(): void {
    if (this.#done) return;
    const now = this.#clock.now();
    if (!this.#held && now - this.#armedAt >= this.#left) {
      this.#finish(
        new TransportError('timeout', `no reply from ${this.#subject} within ${this.#timeoutMs} ms`),
      );
      return;
    }
    if (!this.#suspecting && now - this.#lastHeard >= this.#idleMs) this.#suspect();
    this.#arm();
  }

  /**
   * Silent past the limit: a stall, unless what this (perhaps busy) process has not read yet says otherwise. A round
   * trip to the server first: the heartbeats it sent before its answer are read before the check.
   */
  #suspect(): void {
    this.#suspecting = true;
    const flushed = this.#bus.flush().catch(() => undefined);
    void withTimeout(flushed, this.#idleMs, { unref: true }).then(() => {
      this.#suspecting = false;
      if (this.#done) return;
      const silentMs = this.#clock.now() - this.#lastHeard;
      if (silentMs < this.#idleMs) {
        this.#arm();
        return;
      }
      this.#finish(
        new TransportError(
          'stalled',
          `${this.#subject} sent neither a heartbeat nor a reply for ${silentMs} ms`,
        ),
      );
    });
  }

  #finish(error: TransportError | undefined, value?: z.infer<S>): void {
    if (!this.#end()) return;
    const listener = this.#listener;
    const tell = () => (error ? listener.failed(error) : listener.replied(value as z.infer<S>));
    // Ended while it was being sent (refused at once, or answered by an in-memory bus): its sender hears it once it
    // has the request, as a promise's would.
    if (this.#sending) queueMicrotask(tell);
    else tell();
  }

  /** Leaves its timers and closes its inbox; false when it had ended already. */
  #end(): boolean {
    if (this.#done) return false;
    this.#done = true;
    this.#timers.clear(this);
    this.#stop?.();
    return true;
  }
}

/** A timer that can be held: its time stops running while held, and goes on from what was left when released. */
export function holdableTimer(clock: Clock, ms: number, fire: () => void) {
  let left = ms;
  let armedAt = clock.now();
  let timer: unknown = clock.setTimeout(fire, left);
  let held = false;
  return {
    hold() {
      if (held) return;
      held = true;
      clock.clearTimeout(timer);
      left = Math.max(0, left - (clock.now() - armedAt));
    },
    release() {
      if (!held) return;
      held = false;
      armedAt = clock.now();
      timer = clock.setTimeout(fire, left);
    },
    stop() {
      held = true;
      clock.clearTimeout(timer);
    },
  };
}
