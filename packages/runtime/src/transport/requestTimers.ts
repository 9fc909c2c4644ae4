import { MAX_TIMER_MS } from '@troupe/protocol';
import type { Clock } from '../events/clock.ts';

/** What {@link RequestTimers} wakes: at `at`, its `due()`. Its three fields are the queue's to write. */
export interface TimedRequest {
  due(): void;
  /** When it is to be woken; infinite while it waits for nothing. */
  at: number;
  /** Its place in the queue; -1 while it is not in it. */
  slot: number;
  /** When its time was set, among the queue's: requests due at one time are woken in the order their times were set. */
  order: number;
}

/**
 * The timers of many requests on one timer of a clock: each request is woken at the one time it asks for, and the
 * clock's timer is set for the soonest (a heap of the requests, by time). A parked task's request costs a slot here,
 * not a timer and a closure of its own (about 0.25 KB each in Node). The requests of one clock share its queue
 * ({@link RequestTimers.of}).
 */
export class RequestTimers {
  static readonly #byClock = new WeakMap<Clock, RequestTimers>();

  /** The queue of the requests on `clock`. */
  static of(clock: Clock): RequestTimers {
    let timers = RequestTimers.#byClock.get(clock);
    if (!timers) {
      timers = new RequestTimers(clock);
      RequestTimers.#byClock.set(clock, timers);
    }
    return timers;
  }

  readonly #clock: Clock;
  readonly #heap: TimedRequest[] = [];
  #timer: unknown;
  #timerAt = Number.POSITIVE_INFINITY;
  /** How many times were set: each setting's {@link TimedRequest.order}. */
  #set = 0;

  constructor(clock: Clock) {
    this.#clock = clock;
  }

  /** Wakes `request` at `at` (on the clock's time), in place of the time it had. */
  set(request: TimedRequest, at: number): void {
    request.at = at;
    request.order = this.#set++;
    if (request.slot < 0) {
      request.slot = this.#heap.length;
      this.#heap.push(request);
    }
    this.#sift(request.slot);
    this.#arm();
  }

  /** `request` is woken at no time. */
  clear(request: TimedRequest): void {
    this.#remove(request);
    this.#arm();
  }

  #remove(request: TimedRequest): void {
    const slot = request.slot;
    if (slot < 0) return;
    request.slot = -1;
    request.at = Number.POSITIVE_INFINITY;
    const last = this.#heap.pop() as TimedRequest;
    if (last !== request) {
      this.#heap[slot] = last;
      last.slot = slot;
      this.#sift(slot);
    }
  }

  /** Requests in the queue now, for a test. */
  get size(): number {
    return this.#heap.length;
  }

  /** Sets the clock's timer for the soonest request, unless it is set for that already; none when none waits. */
  #arm(): void {
    const at = this.#heap[0]?.at ?? Number.POSITIVE_INFINITY;
    if (at === this.#timerAt) return;
    this.#clock.clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerAt = at;
    if (at === Number.POSITIVE_INFINITY) return;
    // Node fires a longer timer after 1 ms: one that far off is set for the longest, and set again when that fires.
    const delay = Math.min(MAX_TIMER_MS, Math.max(0, at - this.#clock.now()));
    this.#timer = this.#clock.setTimeout(() => this.#fire(), delay);
  }

  /**
   * Wakes the requests whose time has come, each once (one that asks for a time again is in the queue anew). One whose
   * `due` throws keeps neither the others due nor the queue from being woken: its error is thrown after them.
   */
  #fire(): void {
    this.#timer = undefined;
    this.#timerAt = Number.POSITIVE_INFINITY;
    const now = this.#clock.now();
    const due: TimedRequest[] = [];
    for (let first = this.#heap[0]; first !== undefined && first.at <= now; first = this.#heap[0]) {
      this.#remove(first);
      due.push(first);
    }
    let failed: { error: unknown } | undefined;
    for (const request of due) {
      try {
        request.due();
      } catch (error) {
        failed ??= { error };
      }
    }
    this.#arm();
    if (failed) throw failed.error;
  }

  /** Whether `a` is woken before `b`: the sooner, or at one time the one whose time was set first. */
  static #before(a: TimedRequest, b: TimedRequest): boolean {
    return a.at < b.at || (a.at === b.at && a.order < b.order);
  }

  /** Moves the request at `slot` up or down to where its time puts it. */
  #sift(slot: number): void {
    const heap = this.#heap;
    const request = heap[slot] as TimedRequest;
    let at = slot;
    while (at > 0) {
      const parentAt = (at - 1) >> 1;
      const parent = heap[parentAt] as TimedRequest;
      if (!RequestTimers.#before(request, parent)) break;
      heap[at] = parent;
      parent.slot = at;
      at = parentAt;
    }
    for (;;) {
      const left = 2 * at + 1;
      if (left >= heap.length) break;
      const right = left + 1;
      const child =
        right < heap.length && RequestTimers.#before(heap[right] as TimedRequest, heap[left] as TimedRequest)
          ? right
          : left;
      const sooner = heap[child] as TimedRequest;
      if (!RequestTimers.#before(sooner, request)) break;
      heap[at] = sooner;
      sooner.slot = at;
      at = child;
    }
    heap[at] = request;
    request.slot = at;
  }
}
