import { A2AError } from '@a2a-js/sdk/errors';
import type { A2ARequestHandler } from '@a2a-js/sdk/server';
import { a2aErrorOf } from './a2aErrors.ts';

/** Methods of the handler that stream (async generators); every other one answers once. */
const STREAMING = new Set<string | symbol>(['sendMessageStream', 'resubscribe']);

/**
 * The handler with every error it throws made an A2A one (see {@link a2aErrorOf}), so the SDK's transports answer
 * with the spec's codes; an error nobody expects is passed to `onUnexpected` (which logs it) and answered as an
 * internal error naming the request, never with its own message.
 */
export function guarded(
  handler: A2ARequestHandler,
  onUnexpected: (error: unknown) => Error,
): A2ARequestHandler {
  const map = (error: unknown): Error => a2aErrorOf(error) ?? onUnexpected(error);
  return new Proxy(handler, {
    get(target, key, receiver) {
      const value: unknown = Reflect.get(target, key, receiver);
      if (typeof value !== 'function') return value;
      const method = value as (...args: unknown[]) => unknown;
      if (STREAMING.has(key)) {
        return async function* (...args: unknown[]) {
          try {
            yield* method.apply(target, args) as AsyncGenerator<unknown>;
          } catch (error) {
            throw map(error);
          }
        };
      }
      return async (...args: unknown[]) => {
        try {
          return await method.apply(target, args);
        } catch (error) {
          throw map(error);
        }
      };
    },
  });
}

/** An internal error that says which request failed and nothing of why (the log has why). */
export const internalError = (requestId: string): Error =>
  new A2AError({ message: `internal error (request ${requestId}); the gateway's log has the cause` });
