import type { ToolProgress } from './tool.ts';

/** One progress update of a call as it is published: numbered from 0 within the call. */
export interface ToolProgressUpdate extends ToolProgress {
  seq: number;
}

export interface ProgressThrottleOptions {
  /** Receives the updates let through; an error it throws is swallowed, since progress must not fail a call. */
  emit: (update: ToolProgressUpdate) => void;
  /** At most one update per this many milliseconds; 250 by default. */
  intervalMs?: number;
  now: () => number;
}

/** Longer messages are cut: an update is a status line, not an output channel. */
const MAX_MESSAGE_CHARS = 1000;

/**
 * Lets at most one progress update of a call through per interval: the first at once, later ones at the end of
 * the interval, each time the latest only. `finish()` lets the last pending one through, so the final state is
 * always published before the call's result, and ignores whatever the tool reports after.
 *
 * @example
 * const throttle = new ProgressThrottle({ emit: (update) => publish(update), now: () => performance.now() });
 * throttle.report({ progress: 1, total: 3 });
 * throttle.finish();
 */
export class ProgressThrottle {
  readonly #emit: (update: ToolProgressUpdate) => void;
  readonly #intervalMs: number;
  readonly #now: () => number;
  #seq = 0;
  #lastAt = Number.NEGATIVE_INFINITY;
  #pending: ToolProgress | undefined;
  #timer: NodeJS.Timeout | undefined;
  #finished = false;

  constructor(opts: ProgressThrottleOptions) {
    this.#emit = opts.emit;
    this.#intervalMs = opts.intervalMs ?? 250;
    this.#now = opts.now;
  }

  report(update: ToolProgress): void {
    const clean = sanitize(update);
    if (this.#finished || clean === undefined) return;
    const waitMs = this.#lastAt + this.#intervalMs - this.#now();
    if (waitMs <= 0 && this.#timer === undefined) {
      this.#send(clean);
      return;
    }
    this.#pending = clean;
    this.#timer ??= setTimeout(
      () => {
        this.#timer = undefined;
        this.#flush();
      },
      Math.max(0, waitMs),
    );
  }

  /** Publishes the update still waiting, if any; nothing is published after. */
  finish(): void {
    if (this.#finished) return;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#flush();
    this.#finished = true;
  }

  #flush(): void {
    const pending = this.#pending;
    this.#pending = undefined;
    if (pending) this.#send(pending);
  }

  #send(update: ToolProgress): void {
    this.#lastAt = this.#now();
    const seq = this.#seq;
    this.#seq += 1;
    try {
      this.#emit({ ...update, seq });
    } catch {
      // Whoever publishes progress reports its own failures; the call goes on regardless.
    }
  }
}

// Tools and servers send what they like; an event carries finite numbers and a short message.
function sanitize(update: ToolProgress): ToolProgress | undefined {
  if (typeof update?.progress !== 'number' || !Number.isFinite(update.progress)) return undefined;
  const { total, message } = update;
  return {
    progress: update.progress,
    ...(typeof total === 'number' && Number.isFinite(total) ? { total } : {}),
    ...(typeof message === 'string' ? { message: cut(message) } : {}),
  };
}

// Never between the two halves of a surrogate pair.
function cut(text: string): string {
  if (text.length <= MAX_MESSAGE_CHARS) return text;
  const end = /[\uD800-\uDBFF]/.test(text.charAt(MAX_MESSAGE_CHARS - 1))
    ? MAX_MESSAGE_CHARS - 1
    : MAX_MESSAGE_CHARS;
  return text.slice(0, end);
}
