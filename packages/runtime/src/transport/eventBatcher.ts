import { createHash } from 'node:crypto';
import { isBatchable, subjects, type TroupeEvent } from '@troupe/protocol';
import { type Clock, systemClock } from '../events/clock.ts';
import type { OutgoingEvent } from './eventOutbox.ts';

export interface EventBatcherOptions {
  /** Where each message goes, in order: the outbox's `add`. Resolves whether it was stored. */
  send(message: OutgoingEvent): Promise<boolean>;
  /**
   * How long a task's first batchable event waits for others before its batch goes; default
   * {@link DEFAULT_EVENT_LINGER_MS}. A task's own events, and {@link EventBatcher.flushTask} (before a checkpoint of
   * the task), send it sooner.
   */
  lingerMs?: number;
  /** Most events in one batch; default 64. */
  maxEvents?: number;
  /**
   * Most bytes of events in one batch, in UTF-8 as they go on the wire; default 256 KiB (NATS's default `max_payload`
   * is 1 MiB). The batch's envelope (its id, brackets and commas) comes on top.
   */
  maxBytes?: number;
  clock?: Clock;
}

/** One event as the publisher serialized it. */
export interface BatchableEvent {
  event: TroupeEvent;
  /** `JSON.stringify(event)`, made once. */
  data: string;
}

interface Open {
  events: BatchableEvent[];
  /**
   * The events' bytes in UTF-8: at first the most they could be (see {@link MOST_BYTES_PER_UNIT}), counted exactly
   * once that would reach `maxBytes`, so a batch well under the cap never scans its text.
   */
  bytes: number;
  /** Whether `bytes` is counted exactly. */
  exact: boolean;
  settles: ((stored: boolean) => void)[];
  timer: unknown;
}

/**
 * How long a batch lingers by default: short enough that a person watching `troupe tail` or the dashboard sees no
 * delay, long enough that a quick step's events (a model call answered at once, a tool call) go together
 * (docs/performance.md, "Event batches: the linger").
 */
export const DEFAULT_EVENT_LINGER_MS = 20;

const DEFAULTS = { lingerMs: DEFAULT_EVENT_LINGER_MS, maxEvents: 64, maxBytes: 256 * 1024 };
/** The most UTF-8 bytes one UTF-16 code unit of a string takes (a pair of them, 4). */
const MOST_BYTES_PER_UNIT = 3;

/**
 * Gathers the events of one task into fewer messages: a task's batchable events (not `task.*`, `approval.*`,
 * `human.*`, `eval.*`, see `isBatchable`) wait up to `lingerMs` and go as one `EventBatch` on
 * `troupe.events.<pipeline>.<taskId>.batch`, or sooner when {@link EventBatcher.flushTask} asks (a coordinator, before
 * it writes the task's checkpoint). Order holds for each task: an event that is not batchable sends the task's open
 * batch first, then itself. A flush of one event sends it alone on its own subject.
 *
 * A batch's id (its `Nats-Msg-Id`) is made from the ids of the events in it, so the outbox sending it again after a
 * lost acknowledgement is stored once; each event's promise is told the batch's outcome.
 */
export class EventBatcher {
  readonly #send: EventBatcherOptions['send'];
  readonly #clock: Clock;
  readonly #settings: typeof DEFAULTS;
  /** Open batches by task (`<pipeline>.<taskId>`). */
  readonly #open = new Map<string, Open>();

  constructor(opts: EventBatcherOptions) {
    this.#send = opts.send;
    this.#clock = opts.clock ?? systemClock;
    this.#settings = {
      lingerMs: checkedLingerMs(opts.lingerMs ?? DEFAULTS.lingerMs),
      maxEvents: opts.maxEvents ?? DEFAULTS.maxEvents,
      maxBytes: opts.maxBytes ?? DEFAULTS.maxBytes,
    };
  }

  /** Events waiting in open batches. */
  get size(): number {
    let size = 0;
    for (const open of this.#open.values()) size += open.events.length;
    return size;
  }

  /** Queues an event; resolves whether it (with its batch) was stored. */
  add(item: BatchableEvent): Promise<boolean> {
    const key = `${item.event.pipeline}.${item.event.taskId}`;
    if (!isBatchable(item.event.kind)) {
      this.#flush(key);
      return this.#send(single(item));
    }
    let open = this.#open.get(key);
    if (open !== undefined && !this.#fits(open, item.data)) {
      this.#flush(key);
      open = undefined;
    }
    if (open === undefined) {
      open = { events: [], bytes: 0, exact: false, settles: [], timer: undefined };
      this.#open.set(key, open);
      open.timer = this.#clock.setTimeout(() => this.#flush(key), this.#settings.lingerMs);
    }
    open.events.push(item);
    open.bytes += open.exact ? utf8Bytes(item.data) : item.data.length * MOST_BYTES_PER_UNIT;
    const stored = new Promise<boolean>((resolve) => open.settles.push(resolve));
    if (open.events.length >= this.#settings.maxEvents || this.#full(open)) this.#flush(key);
    return stored;
  }

  /**
   * Sends the task's open batch now, if it has one (without waiting for it to be stored): what a coordinator does
   * before each write of the task's record, so that the events the workflow made before it are sent before the record
   * that a restored run would not make them again from.
   */
  flushTask(pipeline: string, taskId: string): void {
    this.#flush(`${pipeline}.${taskId}`);
  }

  /** Whether `data` fits in `open`: surely, by the most its bytes could be, or else by counting them. */
  #fits(open: Open, data: string): boolean {
    const max = this.#settings.maxBytes;
    if (open.bytes + data.length * MOST_BYTES_PER_UNIT <= max) return true;
    countExactly(open);
    return open.bytes + utf8Bytes(data) <= max;
  }

  #full(open: Open): boolean {
    if (open.bytes < this.#settings.maxBytes) return false;
    countExactly(open);
    return open.bytes >= this.#settings.maxBytes;
  }

  /** Sends every open batch now: before the outbox is settled or stopped. */
  flushAll(): void {
    for (const key of [...this.#open.keys()]) this.#flush(key);
  }

  #flush(key: string): void {
    const open = this.#open.get(key);
    if (open === undefined) return;
    this.#open.delete(key);
    this.#clock.clearTimeout(open.timer);
    const [first] = open.events;
    if (first === undefined) return;
    const message = open.events.length === 1 ? single(first) : batchOf(open.events);
    void this.#send(message).then((stored) => {
      for (const settle of open.settles) settle(stored);
    });
  }
}

/**
 * The most bytes of events a batch holds on a server whose messages may carry `maxPayload` bytes: the default
 * `maxBytes` (a quarter of NATS's default `max_payload`), or half of a smaller limit, which leaves room for the batch's
 * envelope and headers. A batch over the limit would be refused whole, every event in it with it; an event too large
 * for a batch goes alone.
 */
export function batchBytesWithin(maxPayload: number): number {
  return Math.min(DEFAULTS.maxBytes, Math.floor(maxPayload / 2));
}

/** `lingerMs` if it is a number of milliseconds, 0 or more; fails with a `RangeError` that says so otherwise. */
export function checkedLingerMs(lingerMs: number): number {
  if (Number.isFinite(lingerMs) && lingerMs >= 0) return lingerMs;
  throw new RangeError(
    `an event batch's linger must be a number of milliseconds, 0 or more, not ${lingerMs}`,
  );
}

function utf8Bytes(data: string): number {
  return Buffer.byteLength(data, 'utf8');
}

function countExactly(open: Open): void {
  if (open.exact) return;
  open.bytes = open.events.reduce((sum, item) => sum + utf8Bytes(item.data), 0);
  open.exact = true;
}

function single({ event, data }: BatchableEvent): OutgoingEvent {
  return {
    id: event.id,
    subject: subjects.event(event.pipeline, event.taskId, event.kind),
    data,
    headers: { traceparent: event.traceparent },
  };
}

function batchOf(items: BatchableEvent[]): OutgoingEvent {
  const first = (items[0] as BatchableEvent).event;
  const id = batchId(items.map((item) => item.event.id));
  return {
    id,
    subject: subjects.eventBatch(first.pipeline, first.taskId),
    // The events are serialized already: the batch is put together around them, not serialized again.
    data: `{"batch":${JSON.stringify(id)},"events":[${items.map((item) => item.data).join(',')}]}`,
    headers: { traceparent: first.traceparent },
    events: items.length,
  };
}

/**
 * A batch's id: its first event's id and count, readable in a log, and a digest of every id in it, so that a resumed
 * run that groups the same first event with other facts makes another batch, not one the stream drops as a copy.
 */
export function batchId(eventIds: readonly string[]): string {
  const digest = createHash('sha256').update(eventIds.join('\n')).digest('base64url').slice(0, 16);
  return `${eventIds[0]}~${eventIds.length}~${digest}`;
}
