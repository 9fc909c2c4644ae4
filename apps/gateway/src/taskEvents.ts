import { DeliverPolicy, JetStreamApiCodes } from '@nats-io/jetstream';
import { FINAL_EVENT_KINDS, parseMessage, STREAMS, subjects, TroupeEvent } from '@troupe/protocol';
import { jetstreamOf, type NatsBus, TransportError } from '@troupe/runtime';

/** One event of a task as the `EVENTS` stream stored it: its stream sequence is its place, for resuming. */
export interface SequencedEvent {
  seq: number;
  event: TroupeEvent;
}

export interface FollowOptions {
  /** Deliver events stored after this stream sequence (a client's `Last-Event-ID`); from the first by default. */
  after?: number;
  /** Ends the following: the consumer is removed from the server. */
  signal: AbortSignal;
  onEvent(event: SequencedEvent): void | Promise<void>;
  /** Called once the consumer exists on the server: from then on, nothing stored is missed. */
  onReady?(): void | Promise<void>;
}

/**
 * Follows one task's events in the `EVENTS` stream, in stream order: those stored so far, then each one as it is
 * stored, through one ordered consumer — so history and live are one sequence with no gap and no repeat between
 * them, and a client that resumes after sequence N gets exactly what came after N. Ends after the task's final
 * event, or when `signal` aborts. An event stored twice (republished beyond the stream's duplicate window) is
 * delivered once. Fails with `stream_missing` when no coordinator made the stream.
 */
export function followTaskEvents(bus: NatsBus, taskId: string, options: FollowOptions): Promise<void> {
  return followEvents(bus, {
    ...options,
    subject: subjects.taskEvents(taskId),
    until: (event) => FINAL_EVENT_KINDS.includes(event.kind),
  });
}

/**
 * Follows the events of every task (or of one pipeline's), as they are stored: from now, or after a stream
 * sequence to resume. Runs until `signal` aborts.
 */
export function followAllEvents(
  bus: NatsBus,
  options: FollowOptions & { pipeline?: string | undefined },
): Promise<void> {
  const { pipeline, ...rest } = options;
  return followEvents(bus, {
    ...rest,
    subject: pipeline ? subjects.pipelineEvents(pipeline) : subjects.allTaskEvents,
    ...(options.after === undefined ? { fromNow: true } : {}),
  });
}

async function followEvents(
  bus: NatsBus,
  options: FollowOptions & { subject: string; fromNow?: boolean; until?: (event: TroupeEvent) => boolean },
): Promise<void> {
  const js = jetstreamOf(bus);
  let consumer: Awaited<ReturnType<typeof js.consumers.get>>;
  try {
    consumer = await js.consumers.get(STREAMS.events, {
      filter_subjects: options.subject,
      ...(options.after === undefined ? {} : { opt_start_seq: options.after + 1 }),
      ...(options.fromNow ? { deliver_policy: DeliverPolicy.New } : {}),
    });
  } catch (cause) {
    if (
      (cause as { api_error?: { err_code?: number } }).api_error?.err_code ===
      JetStreamApiCodes.StreamNotFound
    ) {
      throw new TransportError(
        'stream_missing',
        `the stream ${STREAMS.events} does not exist on this NATS server`,
        { cause },
      );
    }
    throw cause;
  }
  const messages = await consumer.consume();
  await options.onReady?.();
  const stop = () => messages.stop();
  options.signal.addEventListener('abort', stop, { once: true });
  const seen = new RecentIds();
  try {
    for await (const msg of messages) {
      const parsed = parseMessage(TroupeEvent, msg.data);
      if (!parsed.ok || !seen.add(parsed.value.id)) continue;
      await options.onEvent({ seq: msg.seq, event: parsed.value });
      if (options.until?.(parsed.value)) return;
    }
  } finally {
    options.signal.removeEventListener('abort', stop);
    messages.stop();
    await consumer.delete().catch(() => undefined);
  }
}

/** Ids delivered lately, the oldest forgotten past a bound: a stream that runs for days stays small. */
class RecentIds {
  readonly #ids = new Set<string>();

  /** False when the id was delivered already. */
  add(id: string): boolean {
    if (this.#ids.has(id)) return false;
    this.#ids.add(id);
    if (this.#ids.size > 50_000) {
      const oldest = this.#ids.values().next().value;
      if (oldest !== undefined) this.#ids.delete(oldest);
    }
    return true;
  }
}
