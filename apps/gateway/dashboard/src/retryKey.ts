import { ApiError } from './client.ts';

/** 16 random bytes as hex: `crypto.getRandomValues` works on a page served over plain HTTP, `randomUUID` does not. */
const randomKey = (): string =>
  Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, '0')).join('');

/**
 * The `Idempotency-Key` of a request that makes a task (a restart, a fork): the same key for the same body sent again
 * after its answer never came (the network failed, or the gateway answered 5xx), so the gateway makes no second task;
 * a new key once an answer came (the task made, or a refusal that made none), or for another body.
 */
export class RetryKey {
  #pending: { body: string; key: string } | undefined;
  readonly #fresh: () => string;

  constructor(fresh: () => string = randomKey) {
    this.#fresh = fresh;
  }

  /** Sends `body` with its key; what `call` answers, or its error. */
  async send<T>(body: unknown, call: (key: string) => Promise<T>): Promise<T> {
    const text = JSON.stringify(body);
    if (this.#pending?.body !== text) this.#pending = { body: text, key: this.#fresh() };
    try {
      const answer = await call(this.#pending.key);
      this.#pending = undefined;
      return answer;
    } catch (error) {
      // A refusal made nothing: the next send is a request of its own. Without an answer, it may have made the task.
      if (error instanceof ApiError && error.status < 500) this.#pending = undefined;
      throw error;
    }
  }
}
