import { errorMessage } from '@troupe/protocol';
import { ModelError, type ModelErrorCode } from './errors.ts';

/**
 * How a failed SDK call is classified; the same for the OpenAI and Anthropic SDKs, whose errors share a shape.
 * `endpoint`: the base URL the SDK called, named when the call never got an answer (a connection failed or timed
 * out), since then the first question is which server was tried (a wrong `baseURL`, Ollama not running).
 */
export function toModelError(error: unknown, label: string, endpoint?: string): ModelError {
  const at = endpoint === undefined ? '' : ` (${safeEndpoint(endpoint)})`;
  if (error instanceof ModelError) return error;
  const name = (error as { constructor?: { name?: string } })?.constructor?.name ?? '';
  const message = errorMessage(error);
  if (name === 'APIUserAbortError')
    return new ModelError('aborted', `${label}: request aborted`, { cause: error });
  if (name === 'APIConnectionTimeoutError') {
    return new ModelError('timeout', `${label}: request timed out${at}`, { retryable: true, cause: error });
  }
  if (name === 'APIConnectionError') {
    return new ModelError(
      'connection',
      `${label}: connection${endpoint === undefined ? '' : ` to ${safeEndpoint(endpoint)}`} failed: ${message}`,
      {
        retryable: true,
        cause: error,
      },
    );
  }
  const status = (error as { status?: unknown } | null | undefined)?.status;
  if (typeof status === 'number') {
    const [code, retryable] = classify(status);
    const headers = (error as { headers?: Headers }).headers;
    const retryAfterMs = retryAfter(headers);
    return new ModelError(code, `${label}: ${message}`, {
      retryable,
      status,
      cause: error,
      ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
    });
  }
  return new ModelError('invalid_response', `${label}: unusable response: ${message}`, {
    retryable: true,
    cause: error,
  });
}

function classify(status: number): [ModelErrorCode, boolean] {
  if (status === 429) return ['rate_limited', true];
  if (status === 408) return ['timeout', true];
  if (status === 409 || status >= 500) return ['server_error', true];
  if (status === 401 || status === 403) return ['auth', false];
  if (status === 404) return ['not_found', false];
  return ['bad_request', false];
}

/** `retry-after-ms`, or `retry-after` in seconds or as an HTTP date. */
function retryAfter(headers: Headers | undefined): number | undefined {
  const ms = Number(headers?.get?.('retry-after-ms'));
  if (Number.isFinite(ms) && ms > 0) return ms;
  const value = headers?.get?.('retry-after');
  if (!value) return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1_000);
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now());
}

/**
 * A base URL as it may be shown: scheme, host, port and path, never a user, password, query or fragment, where
 * a key may be written (`?api-key=…`, `https://user:key@host`).
 */
export function safeEndpoint(url: string): string {
  try {
    const parsed = new URL(url);
    return `${parsed.protocol}//${parsed.host}${parsed.pathname.replace(/\/$/, '')}`;
  } catch {
    return 'an endpoint whose URL does not parse';
  }
}
