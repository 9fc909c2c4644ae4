import {
  type Client,
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
  RestTransportFactory,
} from '@a2a-js/sdk/client';
import { errorMessage } from '@troupe/protocol';
import { type Clock, sleep } from '@troupe/runtime';
import type { RemoteAgentSettings } from '../config/remoteAgents.ts';
import { A2aCallError } from './a2aCallError.ts';

/** What every request to one remote agent during one run of a step carries and obeys. */
export interface A2aCallOptions {
  settings: RemoteAgentSettings;
  clock: Clock;
  /** The W3C trace context of the step's span, passed on so the remote agent's work joins the trace. */
  traceparent: string;
  /** Stops every request (the step was stopped). */
  signal: AbortSignal;
  /** The `fetch` to use; the global one when absent (tests give their own to count or break requests). */
  fetch?: typeof fetch;
}

/**
 * A `fetch` for the SDK's transports and card resolver that adds the bearer token and the traceparent, bounds each
 * request by the agent's `timeout` (a stream only until its response starts), and turns what the SDK would report
 * as a bare Error into an {@link A2aCallError} that says whether trying again may help.
 */
function callingFetch(options: A2aCallOptions): typeof fetch {
  const { settings, signal } = options;
  const inner = options.fetch ?? fetch;
  return async (input, init) => {
    const headers = new Headers(init?.headers);
    if (settings.token !== undefined) headers.set('Authorization', `Bearer ${settings.token}`);
    if (options.traceparent) headers.set('traceparent', options.traceparent);
    const timeout = AbortSignal.timeout(settings.requestTimeoutMs);
    const url = String(input instanceof Request ? input.url : input);
    let response: Response;
    try {
      response = await inner(input, { ...init, headers, signal: AbortSignal.any([signal, timeout]) });
    } catch (error) {
      if (signal.aborted) throw error;
      const why = timeout.aborted ? `no answer within ${settings.requestTimeoutMs / 1000} s` : causeOf(error);
      throw new A2aCallError('connection', `cannot reach ${url}: ${why}`, { retryable: true, cause: error });
    }
    if (response.status === 429 || response.status >= 500) {
      const code = response.status === 429 ? 'rate_limited' : 'server_error';
      throw new A2aCallError(code, `${url} answered HTTP ${response.status}`, { retryable: true });
    }
    if (response.status === 401 || response.status === 403) {
      throw new A2aCallError(
        'auth',
        `${url} refused the credentials (HTTP ${response.status}); check the token in a2a.auth`,
      );
    }
    return response;
  };
}

/** The innermost reason of a failed fetch: `ECONNREFUSED`, not undici's "fetch failed". */
function causeOf(error: unknown): string {
  let current: unknown = error;
  while (current instanceof Error && current.cause !== undefined) current = current.cause;
  const code = (current as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' ? `${code} (${errorMessage(current)})` : errorMessage(current);
}

/** A client for the agent whose card the settings name: the card is read, and its preferred binding chosen. */
export async function connectA2a(options: A2aCallOptions): Promise<Client> {
  const fetchImpl = callingFetch(options);
  const factory = new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl }), new RestTransportFactory({ fetchImpl })],
      cardResolver: new DefaultAgentCardResolver({ fetchImpl }),
    }),
  );
  // The configured URL is the card itself, not a base to find it under.
  return factory.createFromUrl(options.settings.card, '');
}

/**
 * Runs `op`, trying again with backoff (doubling from `retryDelay`, jittered) while it fails with a fault that may
 * pass, at most `maxAttempts` times in all; `beforeRetry` runs before each new attempt (to look whether a send that
 * seemed to fail got through). The last fault is thrown, naming the agent and what was being done.
 */
export async function retrying<T>(
  options: A2aCallOptions,
  what: string,
  op: () => Promise<T>,
  beforeRetry?: () => Promise<T | undefined>,
): Promise<T> {
  const { settings, clock, signal } = options;
  for (let attempt = 1; ; attempt++) {
    try {
      if (attempt > 1 && beforeRetry) {
        const found = await beforeRetry();
        if (found !== undefined) return found;
      }
      return await op();
    } catch (error) {
      if (signal.aborted) throw signal.reason ?? error;
      const fault = asCallError(error);
      if (!fault.retryable || attempt >= settings.maxAttempts) {
        const tries = fault.retryable ? ` after ${attempt} attempt${attempt === 1 ? '' : 's'}` : '';
        throw new A2aCallError(
          fault.code,
          `remote agent ${settings.name} (${settings.card}): cannot ${what}${tries}: ${fault.message}`,
          { cause: error },
        );
      }
      const base = settings.retryDelayMs * 2 ** (attempt - 1);
      await sleep(clock, Math.min(base / 2 + (Math.random() * base) / 2, 30_000), signal);
    }
  }
}

/** Any failure of a request, as an {@link A2aCallError}: the SDK's protocol errors are no fault that may pass. */
function asCallError(error: unknown): A2aCallError {
  if (A2aCallError.is(error)) return error;
  // The SDK wraps what the fetch threw in stream and card errors: find ours inside.
  let current: unknown = error;
  while (current instanceof Error) {
    if (A2aCallError.is(current)) return current;
    current = current.cause;
  }
  return new A2aCallError('failed', errorMessage(error), { cause: error });
}
