import {
  ErrorReply,
  errorMessage,
  type InvalidMessageEvent,
  type ParseResult,
  parseMessage,
  subjects,
  type TroupeEvent,
} from '@troupe/protocol';
import type { z } from 'zod';
import { type Clock, systemClock } from '../events/clock.ts';
import { createLogger, type Logger, type MessageLogLevel } from '../logging/index.ts';
import type {
  Bus,
  BusSubscription,
  Delivery,
  Listening,
  ReplyMessage,
  RequestOptions,
  StatusListener,
  SubscribeOptions,
} from './bus.ts';
import type { MessageMeta } from './natsBus.ts';
import { subjectMatches } from './subjectMatches.ts';
import { TransportError } from './transportError.ts';

/** A message as the bus carried it, for assertions. */
export interface CarriedMessage {
  subject: string;
  /** The payload as it was sent (JSON text). */
  data: string;
  reply?: string;
  headers?: Record<string, string>;
}

export interface MemoryBusOptions {
  /** Client name, the default reporter of invalid messages; default `memory-bus`. */
  name?: string;
  /** Where handler failures and warnings go; default a silent logger. */
  logger?: Logger;
  /** Time for request timeouts; a `SimulatedClock` makes them test time. */
  clock?: Clock;
  /**
   * Keep every message and event carried in {@link MemoryBus.messages} and {@link MemoryBus.events}, for tests'
   * assertions; default off, since a long in-process run (`troupe run` in a loop, an eval) would keep them for ever.
   * `@troupe/testkit`'s MemoryBus turns it on.
   */
  keepHistory?: boolean;
}

interface Listener {
  tokens: string[];
  queue: string | undefined;
  receive(message: CarriedMessage): void;
}

const encoder = new TextEncoder();

/**
 * A {@link Bus} inside one process, for `troupe run` (a task run in-process, nothing stored) and for unit tests of
 * the parts that send and receive messages: NATS subject
 * wildcards (`*`, `>`), queue groups (each message to one member, in turn), request/reply with `no_responders` and
 * timeouts on the given clock, headers, and the same validation promises as `NatsBus` (invalid messages answered
 * with `invalid_message` or reported on `troupe.events._invalid`, a throwing handler answered with
 * `handler_failed`). Payloads travel as JSON text, so what a part receives is a copy, as over the wire. Delivery
 * is asynchronous (a microtask), never inside the publisher's call.
 *
 * With `keepHistory`, everything carried is kept for assertions: {@link messages}, and {@link events} for published
 * events.
 */
export class MemoryBus implements Bus {
  readonly name: string;
  readonly logger: Logger;
  readonly messageLogLevel: MessageLogLevel = 'debug';
  /** Every message published, in order (events included, on their subjects). */
  readonly messages: CarriedMessage[] = [];
  /** Every event published, in order. */
  readonly events: TroupeEvent[] = [];
  readonly #clock: Clock;
  readonly #listeners = new Set<Listener>();
  readonly #statusListeners = new Set<StatusListener>();
  /** The next member of each queue group (by subscription pattern and group) to get a message. */
  readonly #turns = new Map<string, number>();
  readonly #handlers = new Set<Promise<void>>();
  readonly #keepHistory: boolean;
  /** Messages published so far, counted whether or not they are kept. */
  #published = 0;
  #inboxes = 0;
  #closed = false;

  constructor(options: MemoryBusOptions = {}) {
    this.name = options.name ?? 'memory-bus';
    this.logger = options.logger ?? createLogger({ level: 'silent' });
    this.#clock = options.clock ?? systemClock;
    this.#keepHistory = options.keepHistory ?? false;
  }

  /** Events are stored at once here: none is ever pending. */
  get pendingEvents(): number {
    return 0;
  }

  /** Whether anyone subscribes to `subject` now. */
  hasListener(subject: string): boolean {
    return this.#matching(subject).length > 0;
  }

  /** The events of one kind published so far. */
  eventsOf<K extends TroupeEvent['kind']>(kind: K): Extract<TroupeEvent, { kind: K }>[] {
    return this.events.filter((event): event is Extract<TroupeEvent, { kind: K }> => event.kind === kind);
  }

  /** Tells status listeners of a connection change, as NATS would (`disconnect`, `reconnect`, …). */
  emitStatus(type: string, data?: unknown): void {
    // Over a copy: a listener added while a change is told (a step call's next send) does not hear that change.
    for (const listener of [...this.#statusListeners]) listener({ type, data });
  }

  /** Resolves once every message sent so far has been delivered and the handlers it started have finished. */
  async settled(): Promise<void> {
    do {
      await new Promise((resolve) => setImmediate(resolve));
      await Promise.allSettled([...this.#handlers]);
    } while (this.#handlers.size > 0);
  }

  publish(subject: string, payload: unknown, _meta?: MessageMeta, headers?: Record<string, string>): void {
    this.#send({ subject, data: this.#encode(subject, payload), ...(headers ? { headers } : {}) });
  }

  publishEvent(event: TroupeEvent): Promise<boolean> {
    const subject = subjects.event(event.pipeline, event.taskId, event.kind);
    const data = this.#encode(subject, event);
    if (this.#keepHistory) this.events.push(JSON.parse(data) as TroupeEvent);
    this.#send({ subject, data, headers: { traceparent: event.traceparent } });
    return Promise.resolve(true);
  }

  reportInvalid(report: Omit<InvalidMessageEvent, 'id' | 'ts' | 'kind'>): void {
    const event: InvalidMessageEvent = {
      id: `invalid-${this.#published + 1}`,
      ts: new Date(this.#clock.now()).toISOString(),
      kind: 'message.invalid',
      ...report,
    };
    this.publish(subjects.invalid, event);
  }

  subscribe<S extends z.ZodType>(
    subject: string,
    schema: S,
    handler: (delivery: Delivery<z.infer<S>>) => void | Promise<void>,
    opts: SubscribeOptions<z.infer<S>> = {},
  ): BusSubscription {
    return this.#listen(subject, opts.queue, (message) =>
      this.#deliver(message, parseMessage(schema, message.data), handler, opts.reporter),
    );
  }

  subscribeText(
    subject: string,
    handler: (delivery: Delivery<string>) => void | Promise<void>,
    opts: SubscribeOptions<string> = {},
  ): BusSubscription {
    return this.#listen(subject, opts.queue, (message) =>
      this.#deliver(message, { ok: true, value: message.data }, handler, opts.reporter),
    );
  }

  request<S extends z.ZodType>(
    subject: string,
    payload: unknown,
    replySchema: S,
    opts: RequestOptions,
  ): Promise<z.infer<S>> {
    return new Promise((resolve, reject) => {
      if (opts.signal?.aborted) {
        reject(new TransportError('aborted', `request to ${subject} was aborted`));
        return;
      }
      let stop: () => void = () => {};
      const finish = (error: TransportError | undefined, value?: z.infer<S>) => {
        this.#clock.clearTimeout(timer);
        opts.signal?.removeEventListener('abort', onAbort);
        stop();
        if (error) reject(error);
        else resolve(value as z.infer<S>);
      };
      const onAbort = () => finish(new TransportError('aborted', `request to ${subject} was aborted`));
      const timer = this.#clock.setTimeout(
        () => finish(new TransportError('timeout', `no reply from ${subject} within ${opts.timeoutMs} ms`)),
        opts.timeoutMs,
      );
      opts.signal?.addEventListener('abort', onAbort, { once: true });
      try {
        stop = this.requestReplies(subject, payload, (reply) => {
          if (!reply.ok) return finish(reply.error);
          const parsed = parseMessage(replySchema, reply.data);
          if (parsed.ok) return finish(undefined, parsed.value);
          const refusal = parseMessage(ErrorReply, reply.data);
          finish(
            refusal.ok
              ? TransportError.fromReply(refusal.value)
              : new TransportError(
                  'invalid_reply',
                  `the reply from ${subject} is not valid: ${parsed.reason}`,
                ),
          );
        });
      } catch (error) {
        finish(error as TransportError);
      }
    });
  }

  requestReplies(subject: string, payload: unknown, onReply: (reply: ReplyMessage) => void): () => void {
    const inbox = `${subjects.inboxPrefix}.memory.${++this.#inboxes}`;
    const subscription = this.#listen(inbox, undefined, (message) =>
      onReply({ ok: true, subject: message.subject, data: encoder.encode(message.data) }),
    );
    const data = this.#encode(subject, payload);
    if (!this.hasListener(subject)) {
      // As NATS answers a request nobody listens to: with a "no responders" status on the inbox.
      queueMicrotask(() =>
        onReply({ ok: false, error: new TransportError('no_responders', `no one is serving ${subject}`) }),
      );
    } else this.#send({ subject, data, reply: inbox });
    return () => subscription.unsubscribe();
  }

  acknowledge(reply: string): void {
    this.publish(reply, {});
  }

  async stillListening(subject: string, payload: unknown): Promise<Listening> {
    if (!this.hasListener(subject)) return 'gone';
    this.publish(subject, payload);
    return 'unanswered';
  }

  async flush(): Promise<void> {
    if (this.#closed) throw new TransportError('closed', 'the bus is closed');
    await new Promise((resolve) => setImmediate(resolve));
  }

  onStatus(listener: StatusListener): () => void {
    this.#statusListeners.add(listener);
    return () => this.#statusListeners.delete(listener);
  }

  async drain(): Promise<void> {
    this.#listeners.clear();
    await this.settled();
    this.#closed = true;
  }

  async close(): Promise<void> {
    this.#listeners.clear();
    this.#closed = true;
  }

  #encode(subject: string, payload: unknown): string {
    if (this.#closed) throw new TransportError('closed', `cannot send on ${subject}: the bus is closed`);
    return JSON.stringify(payload);
  }

  #send(message: CarriedMessage): void {
    this.#published += 1;
    if (this.#keepHistory) this.messages.push(message);
    const receivers = this.#matching(message.subject);
    const groups = new Map<string, Listener[]>();
    for (const listener of receivers) {
      if (listener.queue === undefined) {
        queueMicrotask(() => this.#listeners.has(listener) && listener.receive(message));
        continue;
      }
      const key = `${listener.tokens.join('.')} ${listener.queue}`;
      groups.set(key, [...(groups.get(key) ?? []), listener]);
    }
    for (const [key, members] of groups) {
      const turn = this.#turns.get(key) ?? 0;
      this.#turns.set(key, turn + 1);
      const member = members[turn % members.length] as Listener;
      queueMicrotask(() => this.#listeners.has(member) && member.receive(message));
    }
  }

  #matching(subject: string): Listener[] {
    const tokens = subject.split('.');
    return [...this.#listeners].filter((listener) => subjectMatches(listener.tokens, tokens));
  }

  #listen(
    subject: string,
    queue: string | undefined,
    receive: (message: CarriedMessage) => void,
  ): BusSubscription {
    if (this.#closed) throw new TransportError('closed', `cannot subscribe to ${subject}: the bus is closed`);
    const listener: Listener = { tokens: subject.split('.'), queue, receive };
    this.#listeners.add(listener);
    let close: () => void = () => {};
    const closed = new Promise<void>((resolve) => (close = resolve));
    return {
      unsubscribe: () => {
        this.#listeners.delete(listener);
        close();
      },
      closed,
    };
  }

  #deliver<T>(
    message: CarriedMessage,
    parsed: ParseResult<T>,
    handler: (delivery: Delivery<T>) => void | Promise<void>,
    reporter: string | undefined,
  ): void {
    if (!parsed.ok) {
      if (message.reply !== undefined) {
        this.publish(message.reply, {
          ok: false,
          error: { code: 'invalid_message', message: parsed.reason },
        } satisfies ErrorReply);
      } else if (message.subject !== subjects.invalid) {
        this.reportInvalid({
          subject: message.subject,
          reporter: reporter ?? this.name,
          reason: parsed.reason,
          issues: parsed.issues,
          payload: message.data.slice(0, 2_000),
        });
      }
      return;
    }
    // The closures below keep the subject and inbox, not the message: a delivery held while its step runs does not
    // hold the request's text as well as its value.
    const { subject, reply } = message;
    const respond = (payload: unknown) => {
      if (reply !== undefined && !this.#closed) this.publish(reply, payload);
    };
    const delivery: Delivery<T> = {
      subject,
      value: parsed.value,
      respond,
      ...(reply === undefined ? {} : { reply }),
      ...(message.headers === undefined ? {} : { headers: message.headers }),
    };
    const failed = (error: unknown) => {
      const text = `handler for ${subject} failed: ${errorMessage(error)}`;
      this.logger.error({ err: error, subject }, text);
      respond({ ok: false, error: { code: 'handler_failed', message: text } } satisfies ErrorReply);
    };
    try {
      const result = handler(delivery);
      if (result instanceof Promise) {
        const work = result.catch(failed);
        this.#handlers.add(work);
        void work.finally(() => this.#handlers.delete(work));
      }
    } catch (error) {
      failed(error);
    }
  }
}
