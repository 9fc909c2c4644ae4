import type { Consumer } from '@nats-io/jetstream';
import type { JetStreamBus } from './bus.ts';
import { isStreamMissing, jetstreamManagerOf, jetstreamOf } from './jetstreamSetup.ts';
import { TransportError } from './transportError.ts';

/** One message a stream stored, with its place in the stream. */
export interface StreamMessage {
  /** The stream sequence: a reader that resumes after it gets what was stored after it. */
  readonly seq: number;
  readonly subject: string;
  readonly data: Uint8Array;
}

/** The messages a {@link StreamReader} delivers, in stream order, until `stop()`. */
export interface StreamMessages extends AsyncIterable<StreamMessage> {
  /** Ends the iteration; a loop over the messages then finishes. */
  stop(): void;
}

/**
 * One subject of a stream read in stream order through an ordered consumer: what is stored so far, then each
 * message as it is stored, with no gap and no repeat between the two (the consumer is remade after a lost
 * connection, from the last sequence delivered).
 */
export interface StreamReader {
  /** How many messages from the reader's start it has not delivered yet. */
  pending(): Promise<number>;
  /** Starts delivering the messages; call once. */
  read(): Promise<StreamMessages>;
  /** Removes the reader's consumer from the server, where it would live 5 minutes after its last use. Never rejects. */
  close(): Promise<void>;
}

export interface StreamReaderOptions {
  /**
   * Which messages, as one subject filter: nats-server 2.9 takes a single filter subject per consumer.
   */
  subject: string;
  /** Deliver the messages stored after this stream sequence; from the stream's first by default. */
  after?: number;
}

/**
 * Opens a {@link StreamReader} on `stream`: what a client that follows stored events uses, without reaching
 * JetStream itself. Fails with `stream_missing` when the stream does not exist on the server.
 *
 * @example
 * const reader = await openStreamReader(bus, STREAMS.events, { subject: subjects.taskEvents(id, 'demo'), after: 41 });
 * try {
 *   for await (const msg of await reader.read()) handle(msg.seq, msg.data);
 * } finally {
 *   await reader.close();
 * }
 */
export async function openStreamReader(
  bus: JetStreamBus,
  stream: string,
  options: StreamReaderOptions,
): Promise<StreamReader> {
  let consumer: Consumer;
  try {
    consumer = await jetstreamOf(bus).consumers.get(stream, {
      // A string, not an array: nats-server 2.9 knows `filter_subject` only.
      filter_subjects: options.subject,
      ...(options.after === undefined ? {} : { opt_start_seq: options.after + 1 }),
    });
  } catch (cause) {
    throw streamMissingOr(cause, stream);
  }
  return {
    // Asked of the server each time: nats.js's cached info is the consumer's as it was made, and never changes.
    pending: async () => (await consumer.info()).num_pending,
    // A stored message as nats.js delivers it has these fields; nothing else of it is handed on.
    read: () => consumer.consume(),
    close: () =>
      consumer.delete().then(
        () => undefined,
        () => undefined,
      ),
  };
}

/**
 * The sequence of the last message `stream` holds (0 when it holds none): where a reader that starts from now
 * starts. Fails with `stream_missing` when the stream does not exist on the server.
 */
export async function lastStreamSequence(bus: JetStreamBus, stream: string): Promise<number> {
  try {
    return (await (await jetstreamManagerOf(bus)).streams.info(stream)).state.last_seq;
  } catch (cause) {
    throw streamMissingOr(cause, stream);
  }
}

function streamMissingOr(cause: unknown, stream: string): unknown {
  if (!isStreamMissing(cause)) return cause;
  return new TransportError('stream_missing', `the stream ${stream} does not exist on this NATS server`, {
    cause,
  });
}
