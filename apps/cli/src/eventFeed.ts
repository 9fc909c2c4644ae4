import { readTaskEvents } from '@troupe/client';
import { type InvalidMessageEvent, subjects, type TroupeEvent } from '@troupe/protocol';
import {
  type BusSubscription,
  type JetStreamBus,
  readEventHistory,
  type StoredEvent,
  TransportError,
} from '@troupe/runtime';
import { CLI_WAIT, CliError, explain } from './server.ts';
import { eventsSubject, watchEvents } from './watch.ts';

export interface EventFeedOptions {
  taskId?: string;
  pipeline?: string;
  /** Deliver stored events first: those stored since `since`, or all the `EVENTS` stream keeps. */
  history?: { since?: Date };
  /** Go on with events as they are published, once the stored ones are delivered. */
  live: boolean;
  /** Also deliver reports of invalid messages (a task's feed has none). */
  invalid: boolean;
  /** Stops reading stored events when aborted (a Ctrl-C during a long history). */
  signal?: AbortSignal;
  onEvent(event: TroupeEvent): void;
  onInvalid?(event: InvalidMessageEvent): void;
}

export interface EventFeed {
  /** Reads the stored events again and delivers those not delivered yet: what the live part may have missed. */
  catchUp(): Promise<void>;
  stop(): void;
}

/**
 * A feed of events, each delivered once: first the stored ones, then the live ones. The live subscription
 * starts before the stored events are read, and what it gets meanwhile waits until they are delivered, so no
 * event falls between the two. An event stored twice (republished beyond the stream's duplicate window) or
 * seen both stored and live is delivered once, by its id.
 */
export async function openEventFeed(bus: JetStreamBus, options: EventFeedOptions): Promise<EventFeed> {
  const seen = new RecentIds();
  const deliver = (stored: StoredEvent) => {
    if (!seen.add(stored.event.id)) return;
    if (stored.type === 'event') options.onEvent(stored.event);
    else options.onInvalid?.(stored.event);
  };
  let waiting: StoredEvent[] | undefined = options.history ? [] : undefined;
  const arrive = (stored: StoredEvent) => (waiting ? waiting.push(stored) : deliver(stored));
  let live: BusSubscription[] = [];
  if (options.live) {
    live = watchEvents(bus, {
      ...(options.taskId === undefined ? {} : { taskId: options.taskId }),
      ...(options.pipeline === undefined ? {} : { pipeline: options.pipeline }),
      invalid: options.invalid,
      onEvent: (event) => arrive({ type: 'event', event }),
      onInvalid: (event) => arrive({ type: 'invalid', event }),
    });
    await bus.flush();
  }
  const readStored = async (since: Date | undefined) => {
    for await (const stored of storedEvents(bus, options, since)) {
      if (options.signal?.aborted) return;
      deliver(stored);
    }
  };
  if (options.history) {
    try {
      await readStored(options.history.since);
    } catch (error) {
      for (const subscription of live) subscription.unsubscribe();
      throw error;
    }
    const meanwhile = waiting ?? [];
    waiting = undefined;
    for (const stored of meanwhile) deliver(stored);
  }
  return {
    catchUp: () => readStored(options.history?.since),
    stop: () => {
      for (const subscription of live) subscription.unsubscribe();
    },
  };
}

/** The stored events the feed's options select, as CLI errors when the stream cannot be read. */
async function* storedEvents(
  bus: JetStreamBus,
  options: EventFeedOptions,
  since: Date | undefined,
): AsyncGenerator<StoredEvent> {
  // Invalid-message reports are stored under `troupe.events._invalid`, outside every task's subject.
  const subject = !options.taskId && options.invalid ? subjects.allEvents : eventsSubject(options);
  try {
    for await (const stored of readEventHistory(bus, {
      subject,
      ...(since === undefined ? {} : { since }),
      wait: CLI_WAIT,
    })) {
      if (stored.type === 'invalid' && !options.invalid) continue;
      if (stored.type === 'event' && options.pipeline && stored.event.pipeline !== options.pipeline) continue;
      yield stored;
    }
  } catch (error) {
    if (TransportError.is(error, 'stream_missing'))
      throw new CliError(`no Troupe coordinator has run on this server yet (${error.message})`);
    if (TransportError.is(error)) throw new CliError(error.message);
    throw error;
  }
}

/** Ids delivered lately; the oldest are forgotten past a bound, so a feed that runs for days stays small. */
class RecentIds {
  readonly #ids = new Set<string>();
  readonly #limit: number;

  constructor(limit = 100_000) {
    this.#limit = limit;
  }

  /** False when the id was seen already. */
  add(id: string): boolean {
    if (this.#ids.has(id)) return false;
    this.#ids.add(id);
    if (this.#ids.size > this.#limit) {
      const oldest = this.#ids.values().next().value;
      if (oldest !== undefined) this.#ids.delete(oldest);
    }
    return true;
  }
}

/** Every stored event of one task, in the order the stream kept them, each once. */
export function taskHistory(bus: JetStreamBus, taskId: string, pipeline?: string): Promise<TroupeEvent[]> {
  return readTaskEvents(bus, taskId, pipeline).catch(explain);
}
