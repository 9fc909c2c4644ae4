import { connect, type NatsConnection } from '@nats-io/transport-node';
import { errorMessage } from '@troupe/protocol';
import pRetry from 'p-retry';
import type { Logger } from '../logging/logger.ts';
import { connectionOptions, type NatsAccess } from './natsAccess.ts';
import { TransportError } from './transportError.ts';

/** Where and how a bus connects to NATS. */
export interface ConnectOptions {
  servers: string | string[];
  /** Client name the server shows for this connection, e.g. `troupe-coordinator`. */
  name: string;
  logger: Logger;
  /** Reconnect after a lost connection, without limit; default true. */
  reconnect?: boolean;
  /** How to log in to NATS and talk TLS to it; nothing (and the shared inbox prefix) by default. */
  access?: NatsAccess;
  /**
   * How long to keep trying to make the first connection, backing off and logging each wait, for a service that
   * may start while NATS is down; 0 (the default) fails at once, as a command someone waits for should.
   */
  waitForServerMs?: number;
  /** Ends a wait for the server (see `waitForServerMs`) at once: the connect then fails with `aborted`. */
  signal?: AbortSignal;
}

/** How long a command's first connection may take, handshake and login included. */
const FIRST_CONNECT_TIMEOUT_MS = 5_000;

/** The servers to connect to: a list, or `nats://a:4222,nats://b:4222` as NATS_URL often lists a cluster's. */
export function serverList(servers: string | readonly string[]): string[] {
  return (typeof servers === 'string' ? [servers] : [...servers]).flatMap((s) =>
    s
      .split(',')
      .map((part) => part.trim())
      .filter(Boolean),
  );
}

/**
 * Makes the connection a bus works over, waiting for the server as `waitForServerMs` says; fails with
 * `connect_failed` naming the servers when none answers, or `aborted` when `signal` ends the wait.
 */
export async function connectNats(opts: ConnectOptions): Promise<NatsConnection> {
  const servers = serverList(opts.servers);
  const reconnect = opts.reconnect ?? true;
  const waitMs = opts.waitForServerMs ?? 0;
  let connection: NatsConnection;
  const attempt = () =>
    connect({
      ...connectionOptions(opts.access),
      servers,
      name: opts.name,
      // A command someone waits for gives up on a handshake that stalls (a server that wants a client
      // certificate drops a TLS 1.3 client without one only after the handshake, and nats.js then waits) in 5 s.
      timeout: waitMs <= 0 ? FIRST_CONNECT_TIMEOUT_MS : 20_000,
      reconnect,
      maxReconnectAttempts: reconnect ? -1 : 0,
      // No stack captured up front for every request (it cost ~8% of the CPU under load); a failed request
      // still rejects with the same error classes, and callers add the context that matters.
      noAsyncTraces: true,
    });
  if (opts.signal?.aborted) throw connectAborted(servers, opts.signal);
  try {
    connection =
      waitMs <= 0
        ? await attempt()
        : await untilAborted(
            pRetry(attempt, {
              retries: Number.POSITIVE_INFINITY,
              maxRetryTime: waitMs,
              minTimeout: 250,
              factor: 2,
              maxTimeout: 5_000,
              // Refused credentials or a bad URL will not get better by waiting.
              shouldRetry: ({ error }) =>
                !['AuthorizationError', 'InvalidArgumentError', 'TypeError'].includes(error.name),
              onFailedAttempt: ({ error, attemptNumber }) =>
                opts.logger.warn(
                  { servers, attempt: attemptNumber, err: error },
                  `cannot reach NATS at ${servers.join(', ')} yet (${error.message}); trying again`,
                ),
              ...(opts.signal ? { signal: opts.signal } : {}),
            }),
            opts.signal,
            servers,
          );
  } catch (cause) {
    if (TransportError.is(cause, 'aborted')) throw cause;
    const timedOut = (cause as Error | undefined)?.name === 'TimeoutError';
    throw new TransportError(
      'connect_failed',
      `cannot connect to NATS at ${servers.join(', ')}: ${errorMessage(cause)}. ` +
        (timedOut && opts.access?.tls
          ? 'The TLS handshake or the login did not complete: a server that verifies clients needs a client certificate its CA signed (--tls-cert and --tls-key, or NATS_CERT and NATS_KEY).'
          : 'Check that nats-server (with JetStream, -js) is running there; `troupe up` without NATS_URL starts one.'),
      { cause },
    );
  }
  opts.logger.info(
    { server: connection.getServer(), client: opts.name },
    `connected to NATS at ${connection.getServer()}`,
  );
  return connection;
}

function connectAborted(servers: readonly string[], signal: AbortSignal): TransportError {
  return new TransportError('aborted', `stopped while waiting for NATS at ${servers.join(', ')}`, {
    cause: signal.reason,
  });
}

/**
 * The connection `connecting` makes, or `aborted` as soon as `signal` is: an attempt under way may take its whole
 * handshake timeout, which a stop does not wait for (a connection it makes later is closed at once).
 */
function untilAborted(
  connecting: Promise<NatsConnection>,
  signal: AbortSignal | undefined,
  servers: readonly string[],
): Promise<NatsConnection> {
  if (signal === undefined) return connecting;
  return new Promise<NatsConnection>((resolve, reject) => {
    const onAbort = (): void => {
      reject(connectAborted(servers, signal));
      void connecting.then((late) => late.close()).catch(() => undefined);
    };
    signal.addEventListener('abort', onAbort, { once: true });
    connecting.then(
      (connection) => {
        signal.removeEventListener('abort', onAbort);
        resolve(connection);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(signal.aborted ? connectAborted(servers, signal) : error);
      },
    );
  });
}
