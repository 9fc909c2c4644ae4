import { eventsOf, FINAL_EVENT_KINDS, STREAMS, subjects, type TroupeEvent } from '@troupe/protocol';
import { type JetStreamBus, lastStreamSequence, openStreamReader } from '@troupe/runtime/bus';

/** One event of a task as the `EVENTS` stream stored it: its stream sequence is its place, for resuming. */
export interface SequencedEvent {
  /**
   * Where to resume after this event. Of a batch's events (several in one stream message), only the last has the
   * batch's sequence; the others have the one before it, so a client that stopped half-way through a batch is sent
   * the whole batch again (de-duplicate by `event.id`), never only its rest.
   */
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
 * them, and a client that resumes after sequence N gets exactly what came after N (a batch's earlier events again when
 * it stopped half-way through one: see {@link SequencedEvent}). Ends after the task's final
 * event, or when `signal` aborts. An event stored twice (republished beyond the stream's duplicate window) is
 * delivered once, a resumed client's too: a `task.*` event stored again after N whose first copy came before N is
 * not delivered again. Fails with `stream_missing` when no coordinator made the stream.
 */
export function followTaskEvents(
  bus: JetStreamBus,
  task: { taskId: string; pipeline: string },
  options: FollowOptions,
): Promise<void> {
  return followEvents(bus, {
    ...options,
    // On its own pipeline's subjects only, as its record says: a task id is not a pipeline's to claim.
    subject: subjects.taskEvents(task.taskId, task.pipeline),
    republished: subjects.event(task.pipeline, task.taskId, 'task.>'),
    until: (event) => FINAL_EVENT_KINDS.includes(event.kind),
  });
}

/**
 * Follows a task's `task.*` events only (accepted, migrated, and the final one), as {@link followTaskEvents} does
 * all of them: what a waiter for the task's end needs, without reading every step's events on the way.
 */
export function followTaskEnding(
  bus: JetStreamBus,
  task: { taskId: string; pipeline: string },
  options: FollowOptions,
): Promise<void> {
  return followEvents(bus, {
    ...options,
    subject: subjects.event(task.pipeline, task.taskId, 'task.>'),
    republished: subjects.event(task.pipeline, task.taskId, 'task.>'),
    until: (event) => FINAL_EVENT_KINDS.includes(event.kind),
  });
}

/**
 * Follows the events of every task (or of one pipeline's), as they are stored: from now, or after a stream
 * sequence to resume. Runs until `signal` aborts.
 */
export async function followAllEvents(
  bus: JetStreamBus,
  options: FollowOptions & { pipeline?: string | undefined },
): Promise<void> {
  const { pipeline, ...rest } = options;
  // "From now" is a sequence, not a deliver policy: nats.js rebuilds an ordered consumer from the last sequence it
  // delivered, and with none delivered yet, a `new` one would start again from the stream's first event.
  const after = options.after ?? (await lastStreamSequence(bus, STREAMS.events));
  return followEvents(bus, {
    ...rest,
    after,
    subject: pipeline ? subjects.pipelineEvents(pipeline) : subjects.allTaskEvents,
  });
}

/** How many events of a task are stored after `after`: none, for a task that has ended, means nothing will come. */
export async function eventsAfter(
  bus: JetStreamBus,
  task: { taskId: string; pipeline: string },
  after: number,
): Promise<number> {
  const reader = await openStreamReader(bus, STREAMS.events, {
    subject: subjects.taskEvents(task.taskId, task.pipeline),
    after,
  });
  try {
    return await reader.pending();
  } finally {
    await reader.close();
  }
}

async function followEvents(
  bus: JetStreamBus,
  options: FollowOptions & {
    subject: string;
    /** Where a task's events that a restored run publishes again are (its `task.*`): read up to `after` on a resume. */
    republished?: string;
    until?: (event: TroupeEvent) => boolean;
  },
): Promise<void> {
  const { signal } = options;
  const seen = new RecentIds();
  // A resumed client had the events up to `after`: a copy stored since of one of them is not news to it.
  if (options.after !== undefined && options.after > 0 && options.republished !== undefined) {
    for (const id of await idsUpTo(bus, options.republished, options.after, signal)) seen.add(id);
  }
  const reader = await openStreamReader(bus, STREAMS.events, {
    subject: options.subject,
    ...(options.after === undefined ? {} : { after: options.after }),
  });
  const messages = await reader.read();
  const stop = () => messages.stop();
  signal.addEventListener('abort', stop, { once: true });
  try {
    // The client may have gone while the consumer was made: nothing is left running for it.
    if (signal.aborted) return;
    await options.onReady?.();
    for await (const msg of messages) {
      // An ordered consumer rebuilt after a gap starts where it left off; never hand back what came before.
      if (options.after !== undefined && msg.seq <= options.after) continue;
      const parsed = eventsOf(msg.data, msg.subject);
      if (!parsed.ok) continue;
      const last = parsed.value.length - 1;
      for (const [index, event] of parsed.value.entries()) {
        if (!seen.add(event.id)) continue;
        await options.onEvent({ seq: index === last ? msg.seq : msg.seq - 1, event });
        if (options.until?.(event) || signal.aborted) return;
      }
    }
  } finally {
    signal.removeEventListener('abort', stop);
    messages.stop();
    await reader.close();
  }
}

/**
 * How long the look back at a resumed follow's earlier events waits for the next one: those it reads are stored
 * already, so a wait this long means one it counted is gone (aged out of EVENTS, oldest first, between the count and
 * the read) and will never come.
 */
const LOOKBACK_IDLE_MS = 2_000;

/**
 * The ids of the events stored on `subject` up to sequence `after`: as many as were stored when asked, no more. Ends
 * early, with those read, when `signal` aborts or none comes for {@link LOOKBACK_IDLE_MS}: a copy then delivered
 * twice is better than a follow that never starts.
 */
async function idsUpTo(
  bus: JetStreamBus,
  subject: string,
  after: number,
  signal: AbortSignal,
): Promise<string[]> {
  const reader = await openStreamReader(bus, STREAMS.events, { subject });
  try {
    let left = await reader.pending();
    const ids: string[] = [];
    if (left === 0 || signal.aborted) return ids;
    const messages = await reader.read();
    const stop = () => messages.stop();
    signal.addEventListener('abort', stop, { once: true });
    const next = messages[Symbol.asyncIterator]();
    let timer: NodeJS.Timeout | undefined;
    try {
      while (left > 0) {
        const idle = new Promise<'idle'>((resolve) => {
          timer = setTimeout(() => resolve('idle'), LOOKBACK_IDLE_MS);
        });
        const got = await Promise.race([next.next(), idle]);
        clearTimeout(timer);
        if (got === 'idle' || got.done) break;
        const msg = got.value;
        if (msg.seq > after) break;
        const parsed = eventsOf(msg.data, msg.subject);
        if (parsed.ok) ids.push(...parsed.value.map((event) => event.id));
        left -= 1;
      }
    } finally {
      clearTimeout(timer);
      signal.removeEventListener('abort', stop);
      messages.stop();
    }
    return ids;
  } finally {
    await reader.close();
  }
}

/** Ids delivered lately, the oldest forgotten past a bound: a republished event comes within minutes of the first. */
class RecentIds {
  readonly #ids = new Set<string>();

  /** False when the id was delivered already. */
  add(id: string): boolean {
    if (this.#ids.has(id)) return false;
    this.#ids.add(id);
    if (this.#ids.size > 5_000) {
      const oldest = this.#ids.values().next().value;
      if (oldest !== undefined) this.#ids.delete(oldest);
    }
    return true;
  }
}
