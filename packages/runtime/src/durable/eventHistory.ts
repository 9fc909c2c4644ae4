import { type Consumer, JetStreamApiCodes } from '@nats-io/jetstream';
import {
  eventsOf,
  InvalidMessageEvent,
  parseMessage,
  STREAMS,
  subjects,
  type TroupeEvent,
} from '@troupe/protocol';
import type { JetStreamBus } from '../transport/bus.ts';
import { isApiError, jetstreamOf } from '../transport/jetstreamSetup.ts';
import { TransportError } from '../transport/transportError.ts';
import { type UntilReachableOptions, untilReachable } from '../transport/untilReachable.ts';

/** A message the `EVENTS` stream stored: a task's event, or a report of an invalid message. */
export type StoredEvent =
  | { type: 'event'; event: TroupeEvent }
  | { type: 'invalid'; event: InvalidMessageEvent };

export interface EventHistoryOptions {
  /**
   * Which events, as one subject filter (`subjects.taskEvents(taskId)`, `subjects.allEvents`): nats-server 2.9
   * takes a single filter subject per consumer.
   */
  subject: string;
  /** Start with the first event stored at or after this time; by default, the oldest the stream keeps. */
  since?: Date;
  /** How long to wait for JetStream through an outage before giving up. */
  wait?: UntilReachableOptions;
  /** Messages asked for at once; default 256. */
  batch?: number;
}

/** How long one fetch waits for messages the consumer said were there; past it, the reading ends. */
const FETCH_EXPIRES_MS = 5_000;

/**
 * The events the `EVENTS` stream holds on a subject, oldest first, up to the last one stored when the reading
 * began (or a little later). A message that is not a valid event is skipped. Fails with `stream_missing` when no
 * coordinator has created the stream on this server.
 *
 * A batch of events (`EventBatch`) is handed back as its events, one by one, in order. The stream may hold an event
 * twice (a republished event beyond the duplicate window, or the same fact in two batches of a resumed run); readers
 * that must show each once dedupe on `event.id`.
 *
 * @example
 * for await (const stored of readEventHistory(bus, { subject: subjects.taskEvents('rel-1') })) {
 *   if (stored.type === 'event') console.log(stored.event.kind);
 * }
 */
export async function* readEventHistory(
  bus: JetStreamBus,
  options: EventHistoryOptions,
): AsyncGenerator<StoredEvent, void, undefined> {
  const consumer = await openReader(bus, options);
  try {
    let pending = (await consumer.info(true)).num_pending;
    while (pending > 0) {
      const messages = await consumer.fetch({
        max_messages: Math.min(pending, options.batch ?? 256),
        expires: FETCH_EXPIRES_MS,
      });
      let received = 0;
      for await (const msg of messages) {
        received += 1;
        pending = msg.info.pending;
        yield* parseStored(msg.subject, msg.data);
      }
      // Messages counted as pending may have aged out of the stream before they were fetched.
      if (received === 0) return;
    }
  } finally {
    // An ordered consumer lives on the server for 5 minutes after its last use unless removed.
    await consumer.delete().catch(() => undefined);
  }
}

async function openReader(bus: JetStreamBus, options: EventHistoryOptions): Promise<Consumer> {
  const js = jetstreamOf(bus);
  try {
    return await untilReachable(
      bus,
      `stream ${STREAMS.events}`,
      () =>
        js.consumers.get(STREAMS.events, {
          // A string, not an array: nats-server 2.9 knows `filter_subject` only.
          filter_subjects: options.subject,
          ...(options.since === undefined ? {} : { opt_start_time: options.since.toISOString() }),
        }),
      options.wait,
    );
  } catch (cause) {
    if (!isApiError(cause, JetStreamApiCodes.StreamNotFound)) throw cause;
    throw new TransportError(
      'stream_missing',
      `the stream ${STREAMS.events} does not exist on this NATS server`,
      { cause },
    );
  }
}

/** What one stored message holds: a report, one event, or a batch's events in order (see `eventsOf`). */
function parseStored(subject: string, data: Uint8Array): StoredEvent[] {
  if (subject === subjects.invalid) {
    const parsed = parseMessage(InvalidMessageEvent, data);
    return parsed.ok ? [{ type: 'invalid', event: parsed.value }] : [];
  }
  const parsed = eventsOf(data, subject);
  return parsed.ok ? parsed.value.map((event) => ({ type: 'event', event })) : [];
}
