import type { Msg, NatsConnection } from '@nats-io/transport-node';
import { ErrorReply, errorMessage, parseMessage, subjects } from '@troupe/protocol';
import type { z } from 'zod';
import type { Logger } from '../logging/logger.ts';
import { logMessage, type MessageLogLevel, type MessageMeta, replyMeta } from '../logging/messageLog.ts';
import type { Listening, ReplyMessage, RequestOptions } from './bus.ts';
import { metaFromSubject } from './messageMeta.ts';
import { abortedError, asClosedError, isNoResponders, requestError } from './natsErrors.ts';
import { toMsgHdrs } from './natsHeaders.ts';
import { ReplyInboxes } from './replyInboxes.ts';
import { isReplySubject } from './replySubjects.ts';
import { TransportError } from './transportError.ts';

/** The part of a client's inbox prefix where the replies of agent hosts, to its step calls, come. */
export const STEP_INBOXES = 'steps';

/**
 * A bus's requests over NATS and what answers them: a request and its one validated reply, a request answered many
 * times (a step's heartbeats, then its reply), and the progress messages and acknowledgements between them.
 */
export class NatsRequests {
  readonly #connection: NatsConnection;
  readonly #logger: Logger;
  readonly #level: MessageLogLevel;
  /**
   * Where the answers of requests answered many times come: under this client's own prefix, which its NATS user may
   * be allowed to read alone, in `.steps.` (where agent hosts may answer, while the rest of the prefix takes only the
   * server's replies), and random: a host that may answer one agent's steps cannot guess where another's go (nats.js's
   * inbox ids count up).
   */
  readonly #inboxes: ReplyInboxes;

  constructor(connection: NatsConnection, logger: Logger, level: MessageLogLevel, inboxPrefix?: string) {
    this.#connection = connection;
    this.#logger = logger;
    this.#level = level;
    this.#inboxes = new ReplyInboxes(
      connection,
      logger,
      `${inboxPrefix ?? subjects.inboxPrefix}.${STEP_INBOXES}`,
    );
  }

  /** See {@link Bus.request}. */
  async request<S extends z.ZodType>(
    subject: string,
    payload: unknown,
    replySchema: S,
    opts: RequestOptions,
  ): Promise<z.infer<S>> {
    if (opts.signal?.aborted) throw abortedError(subject);
    const meta = opts.meta ?? metaFromSubject(subject);
    const data = JSON.stringify(payload);
    const pending = this.#connection.request(subject, data, {
      timeout: opts.timeoutMs,
      ...(opts.headers === undefined ? {} : { headers: toMsgHdrs(opts.headers) }),
    });
    logMessage(this.#logger, this.#level, 'out', subject, meta);
    let reply: Msg;
    try {
      reply = await abortable(pending, subject, opts.signal);
    } catch (error) {
      throw requestError(error, subject, opts.timeoutMs);
    }
    logMessage(this.#logger, this.#level, 'in', reply.subject, replyMeta(meta));
    const parsed = parseMessage(replySchema, reply.data);
    if (parsed.ok) return parsed.value;
    const refusal = parseMessage(ErrorReply, reply.data);
    if (refusal.ok) throw TransportError.fromReply(refusal.value);
    throw new TransportError('invalid_reply', `the reply from ${subject} is not valid: ${parsed.reason}`);
  }

  /** See {@link Bus.requestReplies}. */
  requestReplies(subject: string, payload: unknown, onReply: (reply: ReplyMessage) => void): () => void {
    const id = this.#inboxes.open(subject, onReply);
    try {
      this.#connection.publish(subject, JSON.stringify(payload), { reply: this.#inboxes.inbox(id) });
    } catch (error) {
      this.#inboxes.close(id);
      throw (
        asClosedError(error, subject) ??
        new TransportError('request_failed', `cannot send on ${subject}: ${errorMessage(error)}`, {
          cause: error,
        })
      );
    }
    return () => this.#inboxes.close(id);
  }

  /** See {@link Bus.acknowledge}. */
  acknowledge(reply: string, meta?: MessageMeta): void {
    if (!isReplySubject(reply)) {
      this.#logger.warn({ reply }, `not answering on ${reply}: a reply subject must be an inbox`);
      return;
    }
    try {
      this.#connection.publish(reply, '{}');
    } catch {
      // Closing: the sender takes the silence for what it is once the connection is back, or not at all.
      return;
    }
    logMessage(this.#logger, 'trace', 'out', reply, meta ?? metaFromSubject(reply));
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
    logMessage(this.#logger, 'trace', 'out', subject, meta ?? metaFromSubject(subject));
    try {
      await this.#connection.request(subject, JSON.stringify(payload), { timeout: timeoutMs });
    } catch (error) {
      return isNoResponders(error) ? 'gone' : 'unanswered';
    }
    return 'answered';
  }
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
