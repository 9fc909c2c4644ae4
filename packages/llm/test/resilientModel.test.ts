import { describe, expect, it } from 'vitest';
import { ModelError } from '../src/errors.ts';
import { ResilientModel, type ResilientModelOptions } from '../src/resilience/resilientModel.ts';
import type { FallbackInfo, ModelProvider, ModelRequest, ModelResponse, RetryInfo } from '../src/types.ts';

type Outcome = ModelError | ModelResponse;

interface StubModel extends ModelProvider {
  calls: ModelRequest[];
}

/** A provider that answers each call with the next outcome: a ModelError is thrown, a response returned. */
function stubModel(provider: string, model: string, outcomes: Outcome[]): StubModel {
  const queue = [...outcomes];
  const calls: ModelRequest[] = [];
  return {
    provider,
    model,
    calls,
    async complete(request) {
      calls.push(request);
      const next = queue.shift();
      if (next === undefined) throw new Error(`stub ${provider}:${model}: no outcome left`);
      if (next instanceof ModelError) throw next;
      return next;
    },
  };
}

const answer = (content: string, model = 'm'): ModelResponse => ({
  content,
  toolCalls: [],
  usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0 },
  finishReason: 'stop',
  model,
});

const serverError = (message = 'upstream 503') =>
  new ModelError('server_error', message, { retryable: true, status: 503 });

interface Recorder {
  retries: RetryInfo[];
  fallbacks: FallbackInfo[];
  sleeps: number[];
  request: ModelRequest;
  options: (extra?: Partial<ResilientModelOptions>) => ResilientModelOptions;
}

function recorder(random = 0.5, signal?: AbortSignal): Recorder {
  const retries: RetryInfo[] = [];
  const fallbacks: FallbackInfo[] = [];
  const sleeps: number[] = [];
  const request: ModelRequest = {
    messages: [{ role: 'user', content: 'hi' }],
    tools: [],
    context: { taskId: 't1', pipeline: 'demo', agent: 'coder', stepId: 't1.code.1' },
    observer: {
      onRetry: (info) => retries.push(info),
      onFallback: (info) => fallbacks.push(info),
    },
    ...(signal ? { signal } : {}),
  };
  return {
    retries,
    fallbacks,
    sleeps,
    request,
    options: (extra = {}) => ({
      policy: { maxAttempts: 3, baseDelayMs: 100, maxDelayMs: 1_000 },
      sleep: async (ms) => {
        sleeps.push(ms);
      },
      random: () => random,
      ...extra,
    }),
  };
}

async function rejection(promise: Promise<unknown>): Promise<ModelError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ModelError);
  return error as ModelError;
}

describe('ResilientModel', () => {
  it('reports the primary as its provider and model', () => {
    const model = new ResilientModel(stubModel('openai', 'gpt-a', []), [
      stubModel('anthropic', 'claude-b', []),
    ]);
    expect(model.provider).toBe('openai');
    expect(model.model).toBe('gpt-a');
  });

  it('returns the first answer without retrying, sleeping or falling back', async () => {
    const rec = recorder();
    const primary = stubModel('p', 'm1', [answer('hello')]);
    const fallback = stubModel('p', 'm2', [answer('other')]);
    const response = await new ResilientModel(primary, [fallback], rec.options()).complete(rec.request);
    expect(response.content).toBe('hello');
    expect(primary.calls).toHaveLength(1);
    expect(primary.calls[0]).toBe(rec.request);
    expect(fallback.calls).toHaveLength(0);
    expect(rec.retries).toEqual([]);
    expect(rec.fallbacks).toEqual([]);
    expect(rec.sleeps).toEqual([]);
  });

  it('retries a retryable error and returns the answer that follows', async () => {
    const rec = recorder();
    const primary = stubModel('p', 'm1', [serverError(), serverError(), answer('third time')]);
    const response = await new ResilientModel(primary, [], rec.options()).complete(rec.request);
    expect(response.content).toBe('third time');
    expect(primary.calls).toHaveLength(3);
    expect(rec.retries.map((r) => r.attempt)).toEqual([1, 2]);
  });

  it('makes maxAttempts attempts in all, then throws the last error', async () => {
    const rec = recorder();
    const errors = [serverError('first'), serverError('second'), serverError('third')];
    const primary = stubModel('p', 'm1', [...errors, answer('too late')]);
    const error = await rejection(new ResilientModel(primary, [], rec.options()).complete(rec.request));
    expect(error).toBe(errors[2]);
    expect(primary.calls).toHaveLength(3);
    // No wait after the last attempt: there is nothing to wait for.
    expect(rec.sleeps).toHaveLength(2);
    expect(rec.retries).toHaveLength(2);
  });

  it.each([
    ['auth', 401],
    ['bad_request', 400],
  ] as const)('throws the %s error at once: no retry, no sleep, no fallback', async (code, status) => {
    const rec = recorder();
    const fatal = new ModelError(code, `${code} failure`, { status });
    const primary = stubModel('p', 'm1', [fatal, answer('never')]);
    const fallback = stubModel('p', 'm2', [answer('never either')]);
    const error = await rejection(
      new ResilientModel(primary, [fallback], rec.options()).complete(rec.request),
    );
    expect(error).toBe(fatal);
    expect(primary.calls).toHaveLength(1);
    expect(fallback.calls).toHaveLength(0);
    expect(rec.retries).toEqual([]);
    expect(rec.fallbacks).toEqual([]);
    expect(rec.sleeps).toEqual([]);
  });

  it('waits half the exponential ceiling when the jitter source gives 0, capped at maxDelayMs', async () => {
    const rec = recorder(0);
    const primary = stubModel(
      'p',
      'm1',
      Array.from({ length: 6 }, () => serverError()),
    );
    const policy = { maxAttempts: 6, baseDelayMs: 100, maxDelayMs: 1_000 };
    await rejection(new ResilientModel(primary, [], rec.options({ policy })).complete(rec.request));
    // Ceilings 100, 200, 400, 800, then 1600 capped to 1000.
    expect(rec.sleeps).toEqual([50, 100, 200, 400, 500]);
  });

  it('waits the whole ceiling when the jitter source gives nearly 1, capped at maxDelayMs', async () => {
    const rec = recorder(0.999_999);
    const primary = stubModel(
      'p',
      'm1',
      Array.from({ length: 6 }, () => serverError()),
    );
    const policy = { maxAttempts: 6, baseDelayMs: 100, maxDelayMs: 1_000 };
    await rejection(new ResilientModel(primary, [], rec.options({ policy })).complete(rec.request));
    expect(rec.sleeps).toEqual([100, 200, 400, 800, 1_000]);
  });

  it('keeps every delay between half and all of its ceiling for any jitter', async () => {
    for (const random of [0, 0.25, 0.5, 0.75, 0.999]) {
      const rec = recorder(random);
      const primary = stubModel(
        'p',
        'm1',
        Array.from({ length: 4 }, () => serverError()),
      );
      const policy = { maxAttempts: 4, baseDelayMs: 1_000, maxDelayMs: 60_000 };
      await rejection(new ResilientModel(primary, [], rec.options({ policy })).complete(rec.request));
      const ceilings = [1_000, 2_000, 4_000];
      rec.sleeps.forEach((delay, i) => {
        const ceiling = ceilings[i] ?? Number.NaN;
        expect(delay).toBeGreaterThanOrEqual(ceiling / 2);
        expect(delay).toBeLessThanOrEqual(ceiling);
      });
      expect(rec.sleeps).toHaveLength(3);
    }
  });

  it('waits what retry-after asked for instead of the backoff', async () => {
    const rec = recorder(0);
    const limited = new ModelError('rate_limited', 'slow down', {
      retryable: true,
      status: 429,
      retryAfterMs: 750,
    });
    const primary = stubModel('p', 'm1', [limited, answer('ok')]);
    await new ResilientModel(primary, [], rec.options()).complete(rec.request);
    expect(rec.sleeps).toEqual([750]);
    expect(rec.retries[0]?.delayMs).toBe(750);
  });

  it('caps a long retry-after at maxDelayMs', async () => {
    const rec = recorder(0);
    const limited = new ModelError('rate_limited', 'slow down', {
      retryable: true,
      status: 429,
      retryAfterMs: 60_000,
    });
    const primary = stubModel('p', 'm1', [limited, answer('ok')]);
    await new ResilientModel(primary, [], rec.options()).complete(rec.request);
    expect(rec.sleeps).toEqual([1_000]);
  });

  it('tells the observer of each retry: attempt from 1, code, message, delay, and the failing model', async () => {
    const rec = recorder(0);
    const primary = stubModel('openai', 'gpt-a', [
      new ModelError('timeout', 'openai gpt-a: request timed out', { retryable: true }),
      new ModelError('connection', 'openai gpt-a: connection failed: reset', { retryable: true }),
      answer('ok'),
    ]);
    await new ResilientModel(primary, [], rec.options()).complete(rec.request);
    expect(rec.retries).toEqual([
      {
        provider: 'openai',
        model: 'gpt-a',
        attempt: 1,
        code: 'timeout',
        message: 'openai gpt-a: request timed out',
        delayMs: 50,
      },
      {
        provider: 'openai',
        model: 'gpt-a',
        attempt: 2,
        code: 'connection',
        message: 'openai gpt-a: connection failed: reset',
        delayMs: 100,
      },
    ]);
    expect(rec.sleeps).toEqual([50, 100]);
  });

  it('falls back to the next model once the primary has used up its attempts', async () => {
    const rec = recorder();
    const primary = stubModel('p', 'm1', [
      serverError('busy 1'),
      serverError('busy 2'),
      new ModelError('rate_limited', 'p m1: quota', { retryable: true, status: 429 }),
    ]);
    const fallback = stubModel('p', 'm2', [answer('from m2', 'm2')]);
    const response = await new ResilientModel(primary, [fallback], rec.options()).complete(rec.request);
    expect(response.content).toBe('from m2');
    expect(response.model).toBe('m2');
    expect(primary.calls).toHaveLength(3);
    expect(fallback.calls).toHaveLength(1);
    expect(rec.fallbacks).toEqual([
      { from: 'p:m1', to: 'p:m2', code: 'rate_limited', message: 'p m1: quota' },
    ]);
  });

  it('reports retries of a fallback model under that model', async () => {
    const rec = recorder();
    const primary = stubModel('openai', 'gpt-a', [serverError(), serverError(), serverError()]);
    const fallback = stubModel('anthropic', 'claude-b', [serverError('overloaded'), answer('ok')]);
    await new ResilientModel(primary, [fallback], rec.options()).complete(rec.request);
    expect(rec.retries.map((r) => [r.provider, r.model, r.attempt])).toEqual([
      ['openai', 'gpt-a', 1],
      ['openai', 'gpt-a', 2],
      ['anthropic', 'claude-b', 1],
    ]);
    expect(rec.fallbacks).toEqual([
      { from: 'openai:gpt-a', to: 'anthropic:claude-b', code: 'server_error', message: 'upstream 503' },
    ]);
  });

  it('walks the fallbacks in order and throws the last error when all fail', async () => {
    const rec = recorder();
    const policy = { maxAttempts: 1 };
    const a = stubModel('p', 'a', [serverError('a down')]);
    const b = stubModel('p', 'b', [serverError('b down')]);
    const last = serverError('c down');
    const c = stubModel('p', 'c', [last]);
    const error = await rejection(
      new ResilientModel(a, [b, c], rec.options({ policy })).complete(rec.request),
    );
    expect(error).toBe(last);
    expect(rec.fallbacks.map((f) => [f.from, f.to, f.message])).toEqual([
      ['p:a', 'p:b', 'a down'],
      ['p:b', 'p:c', 'b down'],
    ]);
    expect(rec.retries).toEqual([]);
  });

  it('does not fall back after a non-retryable error of a fallback model', async () => {
    const rec = recorder();
    const policy = { maxAttempts: 1 };
    const a = stubModel('p', 'a', [serverError()]);
    const denied = new ModelError('auth', 'p b: bad key', { status: 401 });
    const b = stubModel('p', 'b', [denied]);
    const c = stubModel('p', 'c', [answer('never')]);
    const error = await rejection(
      new ResilientModel(a, [b, c], rec.options({ policy })).complete(rec.request),
    );
    expect(error).toBe(denied);
    expect(c.calls).toHaveLength(0);
    expect(rec.fallbacks).toHaveLength(1);
  });

  it('stops retrying, and does not fall back, once the request is aborted', async () => {
    const controller = new AbortController();
    const rec = recorder(0.5, controller.signal);
    const primary = stubModel('p', 'm1', [serverError(), serverError(), answer('never')]);
    const fallback = stubModel('p', 'm2', [answer('never')]);
    const options = rec.options({
      sleep: async (ms) => {
        rec.sleeps.push(ms);
        controller.abort();
      },
    });
    await rejection(new ResilientModel(primary, [fallback], options).complete(rec.request));
    expect(primary.calls).toHaveLength(1);
    expect(fallback.calls).toHaveLength(0);
    expect(rec.sleeps).toHaveLength(1);
    expect(rec.fallbacks).toEqual([]);
  });

  it('reports an abort during the wait as an `aborted` error', async () => {
    const controller = new AbortController();
    const rec = recorder(0.5, controller.signal);
    const primary = stubModel('p', 'm1', [serverError(), answer('never')]);
    const options = rec.options({ sleep: async () => controller.abort() });
    const error = await rejection(new ResilientModel(primary, [], options).complete(rec.request));
    expect(error.code).toBe('aborted');
    expect(error.retryable).toBe(false);
  });

  it('calls no model when the request is already aborted, and says it was aborted', async () => {
    const controller = new AbortController();
    controller.abort();
    const rec = recorder(0.5, controller.signal);
    const primary = stubModel('p', 'm1', [answer('never')]);
    const fallback = stubModel('p', 'm2', [answer('never')]);
    const error = await rejection(
      new ResilientModel(primary, [fallback], rec.options()).complete(rec.request),
    );
    expect(primary.calls).toHaveLength(0);
    expect(fallback.calls).toHaveLength(0);
    expect(error.code).toBe('aborted');
  });
});
