import { randomBytes } from 'node:crypto';

/**
 * Time and timers, injected so machines, hosts and their deadlines, heartbeats and backoffs are tested with a
 * simulated clock (`SimulatedClock` in @troupe/testkit). `setTimeout`/`clearTimeout` have XState's shape, so the
 * same clock drives actors: `createActor(logic, { clock })`.
 */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

/** The system's clock. Its timers do not keep the process alive: what Troupe waits for does (a connection, a socket). */
export const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms).unref(),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/** Calls `fn` every `ms` on `clock` until the returned function is called. */
export function every(clock: Clock, ms: number, fn: () => void): () => void {
  let handle: unknown;
  let stopped = false;
  const tick = () => {
    if (stopped) return;
    handle = clock.setTimeout(tick, ms);
    fn();
  };
  handle = clock.setTimeout(tick, ms);
  return () => {
    stopped = true;
    clock.clearTimeout(handle);
  };
}

/** Resolves after `ms` on `clock`; rejects with `aborted` at once when `signal` aborts first. */
export function sleep(clock: Clock, ms: number, signal?: AbortSignal, aborted = 'aborted'): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new Error(aborted));
    const onAbort = () => {
      clock.clearTimeout(handle);
      reject(new Error(aborted));
    };
    const handle = clock.setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * A signal that aborts after `ms` on `clock`, with the reason `AbortSignal.timeout` gives (a `TimeoutError`);
 * `cancel` clears its timer once it is no longer needed.
 */
export function timeoutSignal(clock: Clock, ms: number): { signal: AbortSignal; cancel(): void } {
  const controller = new AbortController();
  const handle = clock.setTimeout(
    () => controller.abort(new DOMException('The operation was aborted due to timeout', 'TimeoutError')),
    ms,
  );
  return { signal: controller.signal, cancel: () => clock.clearTimeout(handle) };
}

/** A new W3C trace context (`00-<trace id>-<span id>-01`) for a task. */
export function newTraceparent(): string {
  return `00-${randomHex(16)}-${randomHex(8)}-01`;
}

/**
 * Random bytes for trace contexts, drawn from the CSPRNG 4 KB at a time, each byte used once: inside a busy process a
 * call into it costs far more than its bytes (in `troupe run`'s bench, a median of ~68 µs of wall time per trace
 * context made with two calls, ~9 µs from the pool).
 */
const RANDOM_POOL_BYTES = 4096;
let randomPool = Buffer.alloc(0);
let randomAt = 0;

function randomHex(count: number): string {
  if (randomAt + count > randomPool.length) {
    randomPool = randomBytes(RANDOM_POOL_BYTES);
    randomAt = 0;
  }
  const hex = randomPool.toString('hex', randomAt, randomAt + count);
  randomAt += count;
  return hex;
}
