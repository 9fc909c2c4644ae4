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
 * request by the agent's `timeout` (its body and a stream too: a stream cut is then read again) and its size, and turns what the SDK would report
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
    return guarded(response, url, timeout, options);
  };
}

/**
 * The most bytes one response of a remote agent may have: the SDK reads a body whole (a stream, one event whole), so
 * an agent that sends without end would otherwise take the host's memory, and every step it runs with it.
 */
export const MAX_RESPONSE_BYTES = 64 * 1024 * 1024;

/**
 * The response with its body read under the same rules as its head: past {@link MAX_RESPONSE_BYTES} it is cut off,
 * and a body cut by the request's timeout or the network is a fault that may pass, as a request that got no head is.
 */
function guarded(response: Response, url: string, timeout: AbortSignal, options: A2aCallOptions): Response {
  const { settings, signal } = options;
  const tooLarge = () =>
    new A2aCallError(
      'invalid_response',
      `${url} sent a response larger than ${MAX_RESPONSE_BYTES / 1024 / 1024} MiB, more than Troupe reads of a remote agent`,
    );
  if (Number(response.headers.get('content-length') ?? 0) > MAX_RESPONSE_BYTES) {
    void response.body?.cancel().catch(() => {});
    throw tooLarge();
  }
  if (!response.body) return response;
  const reader = response.body.getReader();
  let seen = 0;
  const body = new ReadableStream<Uint8Array>({
    async pull(out) {
      let next: Awaited<ReturnType<typeof reader.read>>;
      try {
        next = await reader.read();
      } catch (error) {
        if (signal.aborted) out.error(error);
        else {
          const why = timeout.aborted
            ? `no whole answer within ${settings.requestTimeoutMs / 1000} s`
            : causeOf(error);
          out.error(
            new A2aCallError('connection', `cannot read ${url}: ${why}`, { retryable: true, cause: error }),
          );
        }
        return;
      }
      if (next.done) {
        out.close();
        return;
      }
      seen += next.value.byteLength;
      if (seen > MAX_RESPONSE_BYTES) {
        out.error(tooLarge());
        void reader.cancel().catch(() => {});
        return;
      }
      out.enqueue(next.value);
    },
    cancel: (reason) => reader.cancel(reason),
  });
  return new Response(body, {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  });
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
        const named = `remote agent ${settings.name} (${settings.card}): `;
        // A fault of a look made between attempts names the agent already.
        const said = fault.message.startsWith(named) ? fault.message.slice(named.length) : fault.message;
        throw new A2aCallError(fault.code, `${named}cannot ${what}${tries}: ${said}`, { cause: error });
      }
      const base = settings.retryDelayMs * 2 ** (attempt - 1);
      await sleep(clock, Math.min(base / 2 + (Math.random() * base) / 2, 30_000), signal);
    }
  }
}

/** Whether a failure, its attempts spent, is of a kind that may pass (the network, 429, 5xx, a timeout). */
export function mayPass(error: unknown): boolean {
  for (let current: unknown = error; current instanceof Error; current = current.cause) {
    if (A2aCallError.is(current) && current.retryable) return true;
  }
  return false;
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
