import { AckPolicy, DeliverPolicy, JetStreamApiError, type JsMsg } from '@nats-io/jetstream';
import { type NatsConnection, nanos } from '@nats-io/transport-node';
import type { JetStreamBus } from './bus.ts';
import { jetstreamManagerOf, jetstreamOf } from './jetstreamSetup.ts';
import { natsConnectionOf } from './natsBus.ts';
import { type UntilReachableOptions, untilReachable } from './untilReachable.ts';

/** One message a stream stored, as a durable consumer delivers it, with the means to settle it. */
export interface StoredMessage {
  subject: string;
  data: Uint8Array;
  /** The message's headers; of a header given twice, the first value. */
  headers: Record<string, string>;
  /** Position in the stream: the same for every redelivery of this message. */
  streamSequence: number;
  /** When the message was stored, in ms since the epoch. */
  storedAt: number;
  deliveryCount: number;
  /** Done with it: it is not delivered again. */
  ack(): void;
  /** Still working on it: resets the redelivery timer. */
  working(): void;
  /** Give it back for redelivery after a delay. */
  nak(delayMs?: number): void;
  /**
   * Never deliver it again (it can never succeed). Sent without a reason: nats-server 2.9 reads `+TERM <reason>`
   * as no acknowledgement at all and delivers the message again. Say why in a log line or a report instead.
   */
  term(): void;
}

/** One pull: the messages as they arrive, and how to end it early. */
export interface StoredBatch extends AsyncIterable<StoredMessage> {
  close(): Promise<unknown>;
}

/** A durable pull consumer: each message goes to one of the processes that pull from it. */
export interface DurableConsumer {
  /** Pulls up to `max` messages, waiting at most `expiresMs` (1,000 or more) for them. */
  fetch(max: number, expiresMs: number): Promise<StoredBatch>;
}

export interface DurableConsumerOptions {
  stream: string;
  /** The consumer's durable name, shared by every process that pulls from it. */
  name: string;
  filterSubject: string;
  /** How long a message may go without `working()` or an ack before it is delivered again. */
  ackWaitMs: number;
  /** Deliveries of one message before the server gives up on it; -1 for no limit. */
  maxDeliver: number;
  /** How long setting up waits for NATS and JetStream through an outage before it gives up. */
  wait?: UntilReachableOptions;
}

/**
 * Opens the durable consumer `name` on `stream`, making it when it is missing and bringing its ack wait and
 * delivery limit to those given when it is there. It delivers every message the stream holds (a message stored
 * before any process pulled is not skipped), acknowledged one by one, with no cap on unacknowledged messages across
 * the processes (each holds its own).
 */
export async function openDurableConsumer(
  bus: JetStreamBus,
  options: DurableConsumerOptions,
): Promise<DurableConsumer> {
  const { stream, name } = options;
  const jsm = await jetstreamManagerOf(bus, options.wait);
  const settings = {
    ack_wait: nanos(options.ackWaitMs),
    max_deliver: options.maxDeliver,
    max_ack_pending: -1,
  };
  const setUp = async () => {
    try {
      await jsm.consumers.info(stream, name);
      await jsm.consumers.update(stream, name, settings);
    } catch (error) {
      if (!(error instanceof JetStreamApiError)) throw error;
      await jsm.consumers.add(stream, {
        durable_name: name,
        filter_subject: options.filterSubject,
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.All,
        ...settings,
      });
    }
    return jetstreamOf(bus).consumers.get(stream, name);
  };
  const consumer = await untilReachable(bus, `consumer ${name}`, setUp, options.wait);
  const connection = natsConnectionOf(bus);
  return {
    async fetch(max, expiresMs) {
      const pulled = await consumer.fetch({ max_messages: max, expires: expiresMs });
      return {
        close: () => pulled.close(),
        async *[Symbol.asyncIterator]() {
          for await (const msg of pulled) yield storedMessage(msg, connection);
        },
      };
    },
  };
}

// What a JetStream consumer takes as an answer to a message it delivered (JsMsg's own payloads).
const ACK = '+ACK';
const WORKING = '+WPI';
const TERM = '+TERM';
const nakAfter = (delayMs?: number) =>
  delayMs ? `-NAK ${JSON.stringify({ delay: nanos(delayMs) })}` : '-NAK';

/**
 * The message as plain values. It keeps neither the JsMsg nor a view of its bytes: both point into the socket's
 * read buffer (up to 64 KiB, shared with other messages), which a task holds from its claim to its ack, parked
 * tasks for minutes. So the payload is copied, and settling answers the reply subject on the connection as
 * JsMsg does (every answer but `working` is final, and a second final one is not sent).
 */
function storedMessage(msg: JsMsg, connection: NatsConnection): StoredMessage {
  // Every JsMsg has the reply subject its answers go to, but its type does not name it; lacking it, settle through
  // the JsMsg itself (correct, only holding more).
  const reply = (msg as { reply?: unknown }).reply;
  if (typeof reply !== 'string') return settledThrough(msg);
  const headers = headersOf(msg);
  let settled = false;
  const answer = (payload: string, final = true) => {
    if (settled || reply === '') return;
    settled = final;
    connection.publish(reply, payload);
  };
  return {
    subject: msg.subject,
    // A copy: a Buffer's own slice() is a view.
    data: new Uint8Array(msg.data),
    headers,
    ...placeOf(msg),
    ack: () => answer(ACK),
    working: () => answer(WORKING, false),
    nak: (delayMs) => answer(nakAfter(delayMs)),
    term: () => answer(TERM),
  };
}

function settledThrough(msg: JsMsg): StoredMessage {
  return {
    subject: msg.subject,
    data: msg.data,
    headers: headersOf(msg),
    ...placeOf(msg),
    ack: () => msg.ack(),
    working: () => msg.working(),
    nak: (delayMs) => msg.nak(delayMs),
    term: () => msg.term(),
  };
}

function headersOf(msg: JsMsg): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [key, values] of msg.headers ?? []) headers[key] = values[0] ?? '';
  return headers;
}

const placeOf = (msg: JsMsg) => ({
  streamSequence: msg.info.streamSequence,
  storedAt: Number(msg.timestampNanos / 1_000_000n),
  deliveryCount: msg.info.deliveryCount,
});
