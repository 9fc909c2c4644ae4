import type { NatsConnection } from '@nats-io/transport-node';
import { subjects, type TroupeEvent } from '@troupe/protocol';
import type { Logger } from '../logging/logger.ts';
import { logMessage, type MessageLogLevel, type MessageMeta } from '../logging/messageLog.ts';
import { batchBytesWithin, EventBatcher } from './eventBatcher.ts';
import { EventOutbox } from './eventOutbox.ts';
import { TransportError } from './transportError.ts';

export interface EventPublisherOptions {
  connection: NatsConnection;
  logger: Logger;
  level: MessageLogLevel;
  /** See `BusOptions.maxPendingEvents`. */
  maxPending?: number;
  /** See `BusOptions.eventAckTimeoutMs`. */
  ackTimeoutMs?: number;
  /** See `BusOptions.eventBatch`. */
  batch?: boolean;
  /** See `BusOptions.eventBatchLingerMs`. */
  lingerMs?: number;
}

/**
 * A bus's side of its events: each is logged, handed to the {@link EventOutbox} that keeps it until the `EVENTS`
 * stream has stored it, and told to the bus's event listeners (metrics).
 */
export class EventPublisher {
  readonly #connection: NatsConnection;
  readonly #logger: Logger;
  readonly #level: MessageLogLevel;
  readonly #listeners = new Set<(event: TroupeEvent) => void>();
  /** With batching on: what gathers a task's events into one message before the outbox. */
  readonly #batcher: EventBatcher | undefined;
  /** The events not yet stored; the bus settles and stops it when it drains or closes. */
  readonly outbox: EventOutbox;

  constructor(opts: EventPublisherOptions) {
    this.#connection = opts.connection;
    this.#logger = opts.logger;
    this.#level = opts.level;
    this.outbox = new EventOutbox({
      connection: opts.connection,
      logger: opts.logger,
      ...(opts.maxPending === undefined ? {} : { maxPending: opts.maxPending }),
      ...(opts.ackTimeoutMs === undefined ? {} : { ackTimeoutMs: opts.ackTimeoutMs }),
    });
    const outbox = this.outbox;
    const maxPayload = opts.connection.info?.max_payload;
    this.#batcher = opts.batch
      ? new EventBatcher({
          send: (message) => outbox.add(message),
          ...(opts.lingerMs === undefined ? {} : { lingerMs: opts.lingerMs }),
          ...(maxPayload === undefined ? {} : { maxBytes: batchBytesWithin(maxPayload) }),
        })
      : undefined;
  }

  /** Events published and not yet stored (or, without a stream, sent), however many messages carry them. */
  get pending(): number {
    return (this.#batcher?.size ?? 0) + this.outbox.events;
  }

  /** Sends the batches still gathering: before the outbox is settled or stopped. */
  flush(): void {
    this.#batcher?.flushAll();
  }

  /** Sends the task's batch still gathering, if any: see `Bus.sendOpenEvents`. */
  sendOpen(pipeline: string, taskId: string): void {
    this.#batcher?.flushTask(pipeline, taskId);
  }

  /** See `NatsBus.publishEvent`. */
  publish(event: TroupeEvent): Promise<boolean> {
    const subject = subjects.event(event.pipeline, event.taskId, event.kind);
    if (this.#connection.isClosed() || this.#connection.isDraining() || this.outbox.stopped) {
      throw new TransportError('closed', `cannot send on ${subject}: the NATS connection is closed`);
    }
    const meta: MessageMeta = { taskId: event.taskId, kind: event.kind };
    if (event.from !== undefined) meta.from = event.from;
    if (event.to !== undefined) meta.to = event.to;
    const data = JSON.stringify(event);
    const stored = this.#store(event, subject, data);
    logMessage(this.#logger, this.#level, 'out', subject, meta);
    for (const listener of this.#listeners) {
      // A listener (metrics) must never cost an event.
      try {
        listener(event);
      } catch (error) {
        this.#logger.warn({ err: error, kind: event.kind }, 'an event listener failed; the event goes on');
      }
    }
    return stored;
  }

  #store(event: TroupeEvent, subject: string, data: string): Promise<boolean> {
    if (this.#batcher === undefined) {
      return this.outbox.add({ id: event.id, subject, data, headers: { traceparent: event.traceparent } });
    }
    return this.#batcher.add({ event, data });
  }

  /** Calls `listener` with each event published (as it is handed to the outbox); returns how to stop. */
  onPublished(listener: (event: TroupeEvent) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }
}
