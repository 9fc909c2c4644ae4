import { decodeMessage, ErrorReply, validateMessage } from '@troupe/protocol';
import type { z } from 'zod';
import { type Clock, systemClock } from '../events/clock.ts';
import { logMessage, type MessageLogLevel, type MessageMeta, replyMeta } from '../logging/messageLog.ts';
import { withTimeout } from '../withTimeout.ts';
import type { Bus, ReplyMessage } from './bus.ts';
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
  const meta = options.meta ?? {};
  const answer = replyMeta(meta);
  const heartbeatMeta: MessageMeta = { ...answer, kind: 'step.heartbeat' };
  // Sent, then let go: the closures below live as long as the request waits (a step's whole run), and through this
  // scope would keep the payload (a step's request, with the outputs it carries) if they could reach it.
  let unsent: unknown = payload;
  return new Promise((resolve, reject) => {
    if (options.signal?.aborted) {
      reject(new TransportError('aborted', `request to ${subject} was aborted`));
      return;
    }
    const clock = options.clock ?? systemClock;
    let idle: unknown;
    let lastHeard = clock.now();
    let done = false;
    let stop: (() => void) | undefined;
    let unhold: (() => void) | undefined;
    const finish = (error: TransportError | undefined, value?: z.infer<S>) => {
      if (done) return;
      done = true;
      clock.clearTimeout(idle);
      overall.stop();
      unhold?.();
      options.signal?.removeEventListener('abort', onAbort);
      stop?.();
      if (error) reject(error);
      else resolve(value as z.infer<S>);
    };
    /** Silent past the limit: a stall, unless what this (perhaps busy) process has not read yet says otherwise. */
    const check = () => {
      if (done) return;
      const silentMs = clock.now() - lastHeard;
      if (silentMs < options.idleMs) {
        watchIdle(options.idleMs - silentMs);
        return;
      }
      finish(
        new TransportError('stalled', `${subject} sent neither a heartbeat nor a reply for ${silentMs} ms`),
      );
    };
    // A round trip to the server first: the heartbeats it sent before its answer are read before the check.
    const suspect = () => {
      const flushed = bus.flush().catch(() => undefined);
      void withTimeout(flushed, options.idleMs, { unref: true }).then(check);
    };
    const watchIdle = (ms = options.idleMs) => {
      clock.clearTimeout(idle);
      idle = clock.setTimeout(suspect, ms);
    };
    const onAbort = () => finish(new TransportError('aborted', `request to ${subject} was aborted`));
    const overall = holdableTimer(clock, options.timeoutMs, () =>
      finish(new TransportError('timeout', `no reply from ${subject} within ${options.timeoutMs} ms`)),
    );
    if (options.hold) {
      if (options.hold.held) overall.hold();
      unhold = options.hold.listen((held) => (held ? overall.hold() : overall.release()));
    }
    const onReply = (reply: ReplyMessage) => {
      if (done) return;
      if (!reply.ok) {
        finish(reply.error);
        return;
      }
      // Decoded once; a heartbeat says so (`heartbeat: true`), and only then is it checked as one.
      const decoded = decodeMessage(reply.data);
      const json = decoded.ok ? decoded.value : undefined;
      if ((json as { heartbeat?: unknown } | undefined)?.heartbeat === true) {
        const heartbeat = validateMessage(heartbeatSchema, json);
        if (heartbeat.ok) {
          logMessage(bus.logger, 'trace', 'in', reply.subject, heartbeatMeta);
          // Its sender learns this request still waits: across NATS accounts, silence is all it would hear else.
          if (reply.reply !== undefined) bus.acknowledge(reply.reply, heartbeatMeta);
          lastHeard = clock.now();
          watchIdle();
          options.onHeartbeat?.(heartbeat.value);
          return;
        }
      }
      logMessage(bus.logger, bus.messageLogLevel, 'in', reply.subject, answer);
      const parsed = decoded.ok ? validateMessage(replySchema, json) : decoded;
      if (parsed.ok) {
        finish(undefined, parsed.value);
        return;
      }
      const refusal = decoded.ok ? validateMessage(ErrorReply, json) : decoded;
      finish(
        refusal.ok
          ? TransportError.fromReply(refusal.value)
          : new TransportError('invalid_reply', `the reply from ${subject} is not valid: ${parsed.reason}`),
      );
    };
    options.signal?.addEventListener('abort', onAbort, { once: true });
    watchIdle();
    try {
      stop = bus.requestReplies(subject, unsent, onReply);
      unsent = undefined;
    } catch (error) {
      unsent = undefined;
      finish(
        TransportError.is(error)
          ? error
          : new TransportError('request_failed', `cannot send on ${subject}: ${(error as Error).message}`, {
              cause: error,
            }),
      );
      return;
    }
    // A reply may have come before requestReplies returned (an in-memory bus answers at once).
    if (done) stop();
    logMessage(bus.logger, options.logLevel ?? bus.messageLogLevel, 'out', subject, meta);
  });
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
