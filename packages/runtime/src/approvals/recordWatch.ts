import type { HumanRequest } from '@troupe/protocol';
import { type KeyValue, WATCH_POLL as POLL } from '../durable/kvStore.ts';
import type { Logger } from '../logging/index.ts';

/**
 * The least time between two runs of the timer: each run goes through every record watched, so thousands of records
 * coming due a little apart are read in a few runs, not one run each.
 */
const TICK_MS = 250;

/** A record watched: where it is read, the revision last seen, when it is read next, and who hears it. */
interface Watched {
  store: KeyValue<HumanRequest>;
  id: string;
  seen: number;
  waitMs: number;
  dueAt: number;
  reading: boolean;
  onValue: (record: HumanRequest) => void;
}

/**
 * The records of a gate's waiting requests, read on one timer: each record at once when it is watched, then soon
 * after it changed and less often while it does not (as a KV watch reads one key), so a decision written there while
 * its subject's message was lost (`troupe approve` with no process answering, the gateway) is heard. A request keeps
 * an entry in a set here, not a timer and a poll of its own. The timer runs on real time, as a KV watch does, and
 * keeps no process alive.
 */
export class RecordWatch {
  readonly #watched = new Set<Watched>();
  #timer: NodeJS.Timeout | undefined;
  #timerAt = Number.POSITIVE_INFINITY;
  #lastTick = Number.NEGATIVE_INFINITY;
  #closed = false;

  constructor(private readonly logger: Logger) {}

  /**
   * Calls `onValue` with the record as it is now, then with each later value seen, until the returned function.
   * Once {@link close}d, nothing is read.
   */
  watch(store: KeyValue<HumanRequest>, id: string, onValue: (record: HumanRequest) => void): () => void {
    if (this.#closed) return () => {};
    const watched: Watched = {
      store,
      id,
      seen: 0,
      waitMs: POLL.firstMs,
      dueAt: Date.now(),
      reading: false,
      onValue,
    };
    this.#watched.add(watched);
    void this.#read(watched);
    return () => {
      this.#watched.delete(watched);
      if (this.#watched.size === 0) this.#stopTimer();
    };
  }

  /**
   * Stops every read for good: the connection the records are read over has closed, and each read would fail (every
   * waiting request logging so, at its next read, until its deadline).
   */
  close(): void {
    this.#closed = true;
    this.#watched.clear();
    this.#stopTimer();
  }

  /** Records watched now. */
  get size(): number {
    return this.#watched.size;
  }

  async #read(watched: Watched): Promise<void> {
    watched.reading = true;
    try {
      const entry = await watched.store.get(watched.id);
      if (entry !== undefined && entry.revision > watched.seen) {
        watched.seen = entry.revision;
        watched.waitMs = POLL.firstMs;
        if (this.#watched.has(watched)) watched.onValue(entry.value);
      } else {
        watched.waitMs = Math.min(watched.waitMs * 2, POLL.maxMs);
      }
    } catch (error) {
      if (watched.waitMs < POLL.maxMs && !this.#closed)
        this.logger.warn({ err: error, id: watched.id }, 'cannot read a watched request; trying again');
      watched.waitMs = POLL.maxMs;
    }
    watched.reading = false;
    watched.dueAt = Date.now() + watched.waitMs;
    if (this.#watched.has(watched)) this.#schedule(watched.dueAt);
  }

  /** The timer fires by `at`, or {@link TICK_MS} after it last ran if that is later (an earlier one set stands). */
  #schedule(due: number): void {
    const at = Math.max(due, this.#lastTick + TICK_MS);
    if (this.#timer !== undefined && this.#timerAt <= at) return;
    this.#stopTimer();
    this.#timerAt = at;
    this.#timer = setTimeout(() => this.#tick(), Math.max(0, at - Date.now())).unref();
  }

  /** Reads the records whose time has come; the timer is set again by each read as it ends. */
  #tick(): void {
    this.#timer = undefined;
    this.#timerAt = Number.POSITIVE_INFINITY;
    const now = Date.now();
    this.#lastTick = now;
    let next = Number.POSITIVE_INFINITY;
    for (const watched of this.#watched) {
      if (watched.reading) continue;
      if (watched.dueAt <= now) void this.#read(watched);
      else next = Math.min(next, watched.dueAt);
    }
    if (next !== Number.POSITIVE_INFINITY) this.#schedule(next);
  }

  #stopTimer(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerAt = Number.POSITIVE_INFINITY;
  }
}
