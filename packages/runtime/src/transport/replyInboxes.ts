import { randomBytes } from 'node:crypto';
import { Empty, headers, type Msg, type NatsConnection, type Subscription } from '@nats-io/transport-node';
import type { Logger } from '../logging/logger.ts';
import type { ReplyMessage } from './bus.ts';
import { isReplySubject } from './replySubjects.ts';
import { TransportError } from './transportError.ts';

/** A request waiting on its inbox: its subject (for what its failures say), and where its answers go. */
interface Waiting {
  subject: string;
  answered: (reply: ReplyMessage) => void;
}

/** What nats-server sends to a reply subject nobody listens on; nats.js fails a request that gets it as such. */
const NO_RESPONDERS = 503;

/** A random token for a subject: 16 bytes, so nobody who learns one can guess another. */
const token = (): string => randomBytes(16).toString('hex');

/**
 * The inboxes of one connection's requests that are answered many times (a step's heartbeats, then its reply), all on
 * one subscription: each request has an inbox of its own, `<prefix>.<connection's token>.<request's token>`, both
 * random, and the subscription to `<prefix>.<connection's token>.*` hands each message to the request its inbox is
 * for. A request in flight costs an entry in a map, not a subscription (about 1.2 KB of heap each: a parked task
 * keeps its step's request for as long as its model call lasts).
 *
 * A responder sees what a subscription per request showed it: a message asking for an answer (a heartbeat) on the
 * inbox of a request that ended is answered "no responders", as the server answers it for an inbox nobody listens
 * on, so an agent host learns its requester left as soon as before.
 */
export class ReplyInboxes {
  readonly #connection: NatsConnection;
  readonly #logger: Logger;
  /** The inboxes' common part, with the dot the request's token follows. */
  readonly #prefix: string;
  readonly #waiting = new Map<string, Waiting>();
  #subscription: Subscription | undefined;

  constructor(connection: NatsConnection, logger: Logger, prefix: string) {
    this.#connection = connection;
    this.#logger = logger;
    this.#prefix = `${prefix}.${token()}.`;
  }

  /**
   * A new inbox for a request on `subject`, whose answers go to `answered` until {@link ReplyInboxes.close}: its id
   * (the inbox's subject is {@link ReplyInboxes.inbox}), which is all its closer need keep.
   */
  open(subject: string, answered: (reply: ReplyMessage) => void): string {
    this.#subscribe();
    const id = token();
    this.#waiting.set(id, { subject, answered });
    return id;
  }

  /** The subject of inbox `id`. */
  inbox(id: string): string {
    return this.#prefix + id;
  }

  /** Nothing more goes to the request of inbox `id`; a heartbeat there is answered "no responders". */
  close(id: string): void {
    this.#waiting.delete(id);
  }

  /** Made with the first request, and again after one that broke (a refused subscription is closed). */
  #subscribe(): void {
    if (this.#subscription && !this.#subscription.isClosed()) return;
    this.#subscription = this.#connection.subscribe(`${this.#prefix}*`, {
      callback: (error, msg) => (error ? this.#broken(error) : this.#deliver(msg)),
    });
  }

  #deliver(msg: Msg): void {
    const waiting = this.#waiting.get(msg.subject.slice(this.#prefix.length));
    if (waiting) {
      waiting.answered(
        msg.headers?.code === NO_RESPONDERS
          ? { ok: false, error: new TransportError('no_responders', `no one is serving ${waiting.subject}`) }
          : { ok: true, subject: msg.subject, data: msg.data, ...(msg.reply ? { reply: msg.reply } : {}) },
      );
      return;
    }
    // Answered only on an inbox: anyone who may send here could name any subject else (see isReplySubject).
    if (msg.reply === undefined || !isReplySubject(msg.reply)) return;
    try {
      this.#connection.publish(msg.reply, Empty, { headers: headers(NO_RESPONDERS, 'No Responders') });
    } catch {
      // Closing: the responder's request times out, which tells it as much.
    }
  }

  /** The subscription failed (its permission was refused, say): every request waiting fails with it. */
  #broken(error: Error): void {
    this.#logger.warn({ err: error }, 'the subscription for step replies failed');
    this.#subscription = undefined;
    const waiting = [...this.#waiting.values()];
    this.#waiting.clear();
    for (const { subject, answered } of waiting) {
      const failure = `request to ${subject} failed: ${error.message}`;
      answered({ ok: false, error: new TransportError('request_failed', failure, { cause: error }) });
    }
  }
}
