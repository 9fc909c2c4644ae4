import {
  ClosedConnectionError,
  DrainingConnectionError,
  RequestError,
  TimeoutError,
} from '@nats-io/transport-node';
import { errorMessage } from '@troupe/protocol';
import { TransportError } from './transportError.ts';

/** A failed request as the {@link TransportError} its caller handles: `no_responders`, `timeout`, `closed`, or else `request_failed`. */
export function requestError(error: unknown, subject: string, timeoutMs: number): unknown {
  if (error instanceof TransportError) return error;
  if (isNoResponders(error)) {
    return new TransportError('no_responders', `no one is serving ${subject}`, { cause: error });
  }
  if (error instanceof TimeoutError) {
    return new TransportError('timeout', `no reply from ${subject} within ${timeoutMs} ms`, { cause: error });
  }
  return (
    asClosedError(error, subject) ??
    new TransportError('request_failed', `request to ${subject} failed: ${errorMessage(error)}`, {
      cause: error,
    })
  );
}

/** Whether nats.js failed a request because the server said nobody listens on its subject. */
export function isNoResponders(error: unknown): boolean {
  return error instanceof RequestError && error.isNoResponders();
}

/** A send refused by a closed or draining connection, as `closed`; undefined for any other failure. */
export function asClosedError(error: unknown, subject: string): TransportError | undefined {
  if (error instanceof ClosedConnectionError || error instanceof DrainingConnectionError) {
    return new TransportError(
      'closed',
      `cannot send on ${subject}: the NATS connection is ${error.message}`,
      {
        cause: error,
      },
    );
  }
  return undefined;
}

export function closedError(why: string): TransportError {
  return new TransportError('closed', why);
}

export function abortedError(subject: string): TransportError {
  return new TransportError('aborted', `request to ${subject} was aborted`);
}
