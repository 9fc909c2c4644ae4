import pRetry from 'p-retry';
import { ModelError } from '../errors.ts';
import type { ModelProvider, ModelRequest, ModelResponse } from '../types.ts';

/** How hard to try one model before giving up on it. */
export interface RetryPolicy {
  /** Attempts per model, the first included. */
  maxAttempts: number;
  /** Backoff before the second attempt; doubles each time, jittered between half and all of it. */
  baseDelayMs: number;
  maxDelayMs: number;
}

export const DEFAULT_RETRY_POLICY: RetryPolicy = { maxAttempts: 4, baseDelayMs: 500, maxDelayMs: 20_000 };

export interface ResilientModelOptions {
  policy?: Partial<RetryPolicy>;
  /** Waits between attempts; injected so tests need not wait. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** Jitter source in [0, 1); injected for deterministic tests. */
  random?: () => number;
}

/**
 * A model that retries faults that may pass (429, 5xx, timeouts, resets, garbage) with exponential backoff and
 * jitter, honouring `retry-after`, then moves on to the fallback models in order. Errors that cannot succeed
 * (400, 401, 403, 404) fail at once. Every retry and fallback is reported to the request's observer.
 */
export class ResilientModel implements ModelProvider {
  readonly provider: string;
  readonly model: string;
  readonly #chain: readonly ModelProvider[];
  readonly #policy: RetryPolicy;
  readonly #sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  readonly #random: () => number;

  constructor(
    primary: ModelProvider,
    fallbacks: readonly ModelProvider[] = [],
    options: ResilientModelOptions = {},
  ) {
    this.provider = primary.provider;
    this.model = primary.model;
    this.#chain = [primary, ...fallbacks];
    this.#policy = { ...DEFAULT_RETRY_POLICY, ...options.policy };
    this.#sleep = options.sleep ?? sleep;
    this.#random = options.random ?? Math.random;
  }

  async complete(request: ModelRequest): Promise<ModelResponse> {
    let last: ModelError | undefined;
    for (const [index, model] of this.#chain.entries()) {
      const previous = this.#chain[index - 1];
      if (previous && last) {
        request.observer?.onFallback?.({
          from: label(previous),
          to: label(model),
          code: last.code,
          message: last.message,
        });
      }
      try {
        return await this.#withRetries(model, request);
      } catch (error) {
        if (request.signal?.aborted)
          throw new ModelError('aborted', `${label(model)}: call aborted`, { cause: error });
        last =
          error instanceof ModelError
            ? error
            : new ModelError('invalid_response', String(error), { cause: error });
        if (!last.retryable) throw last;
      }
    }
    throw last ?? new ModelError('config', 'no model to call');
  }

  #withRetries(model: ModelProvider, request: ModelRequest): Promise<ModelResponse> {
    return pRetry(() => model.complete(request), {
      retries: this.#policy.maxAttempts - 1,
      // Delays are ours (retry-after aware), taken in onFailedAttempt, so p-retry adds none.
      minTimeout: 0,
      maxTimeout: 0,
      randomize: false,
      ...(request.signal ? { signal: request.signal } : {}),
      shouldRetry: ({ error }) => error instanceof ModelError && error.retryable,
      onFailedAttempt: async ({ error, attemptNumber, retriesLeft }) => {
        if (!(error instanceof ModelError) || !error.retryable || retriesLeft === 0) return;
        const delayMs = this.#delay(attemptNumber, error);
        request.observer?.onRetry?.({
          provider: model.provider,
          model: model.model,
          attempt: attemptNumber,
          code: error.code,
          message: error.message,
          delayMs,
        });
        await this.#sleep(delayMs, request.signal);
      },
    });
  }

  /** `retry-after` when the provider gave one (capped), else exponential backoff with jitter. */
  #delay(attempt: number, error: ModelError): number {
    const { baseDelayMs, maxDelayMs } = this.#policy;
    if (error.retryAfterMs !== undefined) return Math.min(error.retryAfterMs, maxDelayMs);
    const ceiling = Math.min(maxDelayMs, baseDelayMs * 2 ** (attempt - 1));
    return Math.round(ceiling / 2 + (this.#random() * ceiling) / 2);
  }
}

const label = (model: ModelProvider) => `${model.provider}:${model.model}`;

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
  });
}
