import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ModelError } from '../src/errors.ts';
import { toModelError } from '../src/sdkErrors.ts';

const LABEL = 'openai gpt-test';

/** An SDK error for `status`, built the way each SDK builds it from a response. */
const SDKS = {
  openai: (status: number, message: string, headers: Record<string, string> = {}) =>
    OpenAI.APIError.generate(status, { message }, message, new Headers(headers)),
  anthropic: (status: number, message: string, headers: Record<string, string> = {}) =>
    Anthropic.APIError.generate(
      status,
      { type: 'error', error: { type: 'api_error', message } },
      message,
      new Headers(headers),
    ),
};

afterEach(() => {
  vi.useRealTimers();
});

describe('toModelError', () => {
  it('classifies an OpenAI 429 as rate_limited, retryable, with retry-after in milliseconds', () => {
    const sdkError = new OpenAI.RateLimitError(
      429,
      { message: 'x' },
      'x',
      new Headers({ 'retry-after': '2' }),
    );
    const error = toModelError(sdkError, LABEL);
    expect(error).toBeInstanceOf(ModelError);
    expect(error.code).toBe('rate_limited');
    expect(error.retryable).toBe(true);
    expect(error.status).toBe(429);
    expect(error.retryAfterMs).toBe(2_000);
    expect(error.cause).toBe(sdkError);
  });

  it('classifies an Anthropic 429 the same way', () => {
    const sdkError = new Anthropic.RateLimitError(
      429,
      { type: 'error', error: { type: 'rate_limit_error', message: 'x' } },
      'x',
      new Headers({ 'retry-after': '3' }),
    );
    const error = toModelError(sdkError, 'anthropic claude-test');
    expect(error.code).toBe('rate_limited');
    expect(error.retryable).toBe(true);
    expect(error.retryAfterMs).toBe(3_000);
  });

  it('prefers retry-after-ms over retry-after', () => {
    const sdkError = SDKS.openai(429, 'slow down', { 'retry-after-ms': '1500', 'retry-after': '9' });
    expect(toModelError(sdkError, LABEL).retryAfterMs).toBe(1_500);
  });

  it('reads retry-after given as an HTTP date as the time until then', () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(new Date('2025-11-03T10:00:00Z'));
    const sdkError = SDKS.anthropic(429, 'slow down', { 'retry-after': 'Mon, 03 Nov 2025 10:00:05 GMT' });
    expect(toModelError(sdkError, LABEL).retryAfterMs).toBe(5_000);
  });

  it('reads an HTTP date already past as no wait at all', () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(new Date('2025-11-03T10:00:00Z'));
    const sdkError = SDKS.openai(503, 'busy', { 'retry-after': 'Mon, 03 Nov 2025 09:59:00 GMT' });
    expect(toModelError(sdkError, LABEL).retryAfterMs).toBe(0);
  });

  it('leaves retryAfterMs unset without a retry header, or with one it cannot read', () => {
    expect(toModelError(SDKS.openai(429, 'slow down'), LABEL).retryAfterMs).toBeUndefined();
    expect(toModelError(SDKS.openai(429, 'slow down', { 'retry-after': 'soon' }), LABEL).retryAfterMs).toBe(
      undefined,
    );
  });

  describe.each(Object.entries(SDKS))('%s status codes', (_sdk, make) => {
    it.each([
      [500, 'server_error', true],
      [502, 'server_error', true],
      [503, 'server_error', true],
      [529, 'server_error', true],
      [409, 'server_error', true],
      [408, 'timeout', true],
      [429, 'rate_limited', true],
      [400, 'bad_request', false],
      [422, 'bad_request', false],
      [401, 'auth', false],
      [403, 'auth', false],
      [404, 'not_found', false],
    ] as const)('%i → %s (retryable: %s)', (status, code, retryable) => {
      const error = toModelError(make(status, `scripted ${status}`), LABEL);
      expect(error.code).toBe(code);
      expect(error.retryable).toBe(retryable);
      expect(error.status).toBe(status);
    });
  });

  it.each([
    [
      'openai',
      new OpenAI.APIConnectionError({ message: 'Connection error.', cause: new Error('ECONNRESET') }),
    ],
    ['anthropic', new Anthropic.APIConnectionError({ message: 'Connection error.' })],
  ])('classifies the %s SDK connection error as connection, retryable', (_sdk, sdkError) => {
    const error = toModelError(sdkError, LABEL);
    expect(error.code).toBe('connection');
    expect(error.retryable).toBe(true);
    expect(error.status).toBeUndefined();
    expect(error.message).toBe(`${LABEL}: connection failed: Connection error.`);
  });

  it.each([
    ['openai', new OpenAI.APIConnectionTimeoutError()],
    ['anthropic', new Anthropic.APIConnectionTimeoutError()],
  ])('classifies the %s SDK timeout as timeout, retryable (not as a connection error)', (_sdk, sdkError) => {
    const error = toModelError(sdkError, LABEL);
    expect(error.code).toBe('timeout');
    expect(error.retryable).toBe(true);
  });

  it.each([
    ['openai', new OpenAI.APIUserAbortError()],
    ['anthropic', new Anthropic.APIUserAbortError()],
  ])('classifies the %s SDK user abort as aborted, not retryable', (_sdk, sdkError) => {
    const error = toModelError(sdkError, LABEL);
    expect(error.code).toBe('aborted');
    expect(error.retryable).toBe(false);
    expect(error.cause).toBe(sdkError);
  });

  it('classifies any other error as an unusable response worth retrying', () => {
    const cause = new SyntaxError('Unexpected token < in JSON at position 0');
    const error = toModelError(cause, LABEL);
    expect(error.code).toBe('invalid_response');
    expect(error.retryable).toBe(true);
    expect(error.status).toBeUndefined();
    expect(error.message).toBe(`${LABEL}: unusable response: Unexpected token < in JSON at position 0`);
    expect(error.cause).toBe(cause);
  });

  it('classifies a thrown string as an unusable response', () => {
    const error = toModelError('boom', LABEL);
    expect(error.code).toBe('invalid_response');
    expect(error.message).toBe(`${LABEL}: unusable response: boom`);
  });

  it('classifies a thrown undefined or null as an unusable response instead of crashing', () => {
    expect(toModelError(undefined, LABEL).code).toBe('invalid_response');
    expect(toModelError(null, LABEL).code).toBe('invalid_response');
  });

  it('passes a ModelError through unchanged', () => {
    const original = new ModelError('scripted_failure', 'scripted', { retryable: true });
    expect(toModelError(original, LABEL)).toBe(original);
  });

  it('prefixes the message with the label and keeps the provider message', () => {
    const error = toModelError(SDKS.openai(400, 'messages: field required'), LABEL);
    expect(error.message.startsWith(`${LABEL}: `)).toBe(true);
    expect(error.message).toContain('messages: field required');
    expect(toModelError(new OpenAI.APIConnectionTimeoutError(), 'anthropic claude-x').message).toBe(
      'anthropic claude-x: request timed out',
    );
  });

  it('names the endpoint a connection failed to, without a user, password or query', () => {
    const failed = new OpenAI.APIConnectionError({ message: 'Connection error.' });
    const error = toModelError(failed, LABEL, 'http://me:hunter2@localhost:11434/v1/?api-key=sk-secret');
    expect(error.code).toBe('connection');
    expect(error.message).toBe(
      'openai gpt-test: connection to http://localhost:11434/v1 failed: Connection error.',
    );
    const timedOut = toModelError(new OpenAI.APIConnectionTimeoutError(), LABEL, 'https://api.openai.com/v1');
    expect(timedOut.message).toBe('openai gpt-test: request timed out (https://api.openai.com/v1)');
  });
});
