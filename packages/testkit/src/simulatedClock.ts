import type { Clock } from '@troupe/runtime';

interface Timer {
  at: number;
  /** Order of scheduling, so timers due at the same time run in the order they were set. */
  seq: number;
  fn: () => void;
}

/**
 * A {@link Clock} whose time moves only when the test moves it: `advance(ms)` runs, in order, every timer that
 * falls due meanwhile (and those they set that fall due too), each with `now()` at its due time. Give it to hosts
 * and actors (`createActor(logic, { clock })`) to test deadlines, heartbeats and backoffs in milliseconds of test
 * time.
 */
export class SimulatedClock implements Clock {
  #now: number;
  #seq = 0;
  readonly #timers = new Map<number, Timer>();

  constructor(start = Date.UTC(2026, 0, 1)) {
    this.#now = start;
  }

  now(): number {
    return this.#now;
  }

  setTimeout(fn: () => void, ms: number): number {
    const handle = ++this.#seq;
    this.#timers.set(handle, { at: this.#now + Math.max(0, ms), seq: handle, fn });
    return handle;
  }

  clearTimeout(handle: unknown): void {
    this.#timers.delete(handle as number);
  }

  /** How long from now each pending timer is due, soonest first. */
  pending(): number[] {
    return [...this.#timers.values()].map((timer) => timer.at - this.#now).sort((a, b) => a - b);
  }

  /** Moves time forward by `ms`, running the timers that fall due on the way. */
  advance(ms: number): void {
    const end = this.#now + ms;
    for (;;) {
      let next: [number, Timer] | undefined;
      for (const entry of this.#timers) {
        const [, timer] = entry;
        if (
          timer.at <= end &&
          (!next || timer.at < next[1].at || (timer.at === next[1].at && timer.seq < next[1].seq))
        )
          next = entry;
      }
      if (!next) break;
      this.#timers.delete(next[0]);
      this.#now = next[1].at;
      next[1].fn();
    }
    this.#now = end;
  }
}
