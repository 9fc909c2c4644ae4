import type { ModelDelta } from '@troupe/llm';

/** One batch of streamed deltas, as it goes out in an `llm.delta` event. */
export interface DeltaBatch {
  seq: number;
  text: string;
  toolCalls: { index: number; id?: string; name?: string; arguments: string }[];
}

export interface DeltaBatcherOptions {
  /** Longest a delta waits before its batch goes out. */
  intervalMs?: number;
  /** A batch goes out at once when it holds this many characters. */
  maxChars?: number;
  emit(batch: DeltaBatch): void;
}

/**
 * Gathers a streamed reply's deltas into batches, so a reply is a handful of NATS messages rather than one
 * per token. Adjacent pieces of the same tool call are joined.
 */
export class DeltaBatcher {
  readonly #intervalMs: number;
  readonly #maxChars: number;
  readonly #emit: (batch: DeltaBatch) => void;
  #seq = 0;
  #pending: DeltaBatch | undefined;
  #size = 0;
  #timer: NodeJS.Timeout | undefined;

  constructor(options: DeltaBatcherOptions) {
    this.#intervalMs = options.intervalMs ?? 100;
    this.#maxChars = options.maxChars ?? 2_048;
    this.#emit = options.emit;
  }

  add(delta: ModelDelta): void {
    const batch = this.#pending ?? { seq: this.#seq, text: '', toolCalls: [] };
    this.#pending = batch;
    if (delta.type === 'text') {
      batch.text += delta.text;
      this.#size += delta.text.length;
    } else {
      const last = batch.toolCalls.at(-1);
      if (last && last.index === delta.index && delta.id === undefined && delta.name === undefined) {
        last.arguments += delta.arguments;
      } else {
        const { type: _type, ...call } = delta;
        batch.toolCalls.push(call);
      }
      this.#size += delta.arguments.length;
    }
    if (this.#size >= this.#maxChars) this.flush();
    else this.#timer ??= setTimeout(() => this.flush(), this.#intervalMs);
  }

  /** Sends what is pending now. */
  flush(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    const batch = this.#pending;
    if (!batch) return;
    this.#pending = undefined;
    this.#size = 0;
    this.#seq++;
    this.#emit(batch);
  }
}
