import { JetStreamApiError } from '@nats-io/jetstream';
import { errorMessage } from '@troupe/protocol';
import pRetry from 'p-retry';
import type { JetStreamBus } from './bus.ts';
import { TransportError } from './transportError.ts';

/** How long a start-up call to JetStream keeps trying before it gives up. */
export interface UntilReachableOptions {
  /**
   * How long to keep trying while NATS does not answer: timeouts, a lost connection, a JetStream cluster without
   * a leader. Default 5 minutes.
   */
  outageMs?: number;
  /**
   * How long to keep trying while the server answers that it has no JetStream, as it may for a moment while it
   * restarts. A server started without `-js` is reported once this has passed. Default 30 s.
   */
  noJetStreamMs?: number;
}

/** Default of {@link UntilReachableOptions.outageMs}: a restart, an upgrade or a rescheduled NATS pod fits in it. */
export const DEFAULT_OUTAGE_MS = 5 * 60_000;
/** Default of {@link UntilReachableOptions.noJetStreamMs}. */
export const DEFAULT_NO_JETSTREAM_MS = 30_000;

/** Waits between attempts: 250 ms, doubling, at most 5 s. */
const BACKOFF = { minTimeout: 250, factor: 2, maxTimeout: 5_000 } as const;

/** What a failed attempt says: wait for NATS, wait (not long) for JetStream, or give up now (refused, or else). */
type Failure = 'unreachable' | 'no_jetstream' | 'refused' | 'final';

/**
 * JetStream API answers that mean "not now" rather than "no": the system is temporarily unavailable (10008), the
 * cluster cannot handle the request now (10009).
 */
export const UNREACHABLE_API_CODES: ReadonlySet<number> = new Set([10008, 10009]);
/** 10076: JetStream is not enabled. */
const JETSTREAM_NOT_ENABLED = 10076;

/** NATS client errors of a slow or lost connection, which a reconnect cures. */
export const CONNECTION_ERRORS: ReadonlySet<string> = new Set([
  'TimeoutError',
  'RequestError',
  'ConnectionError',
]);

/**
 * Whether the server refused the request's subject to this client's user. nats.js fails such a request at once with
 * a `RequestError` caused by the refusal, which no wait cures.
 */
export function isPermissionRefusal(error: unknown): boolean {
  return permissionRefusal(error) !== undefined;
}

/** The server's refusal of the subject to this client's user, where `error` or one of its causes is one. */
export function permissionRefusal(error: unknown): Error | undefined {
  for (let e = error; e instanceof Error; e = e.cause) {
    if (e.name === 'PermissionViolationError') return e;
  }
  return undefined;
}

function failureOf(error: unknown): Failure {
  if (!(error instanceof Error)) return 'final';
  if (isPermissionRefusal(error)) return 'refused';
  // nats.js turns "no responders" on the JetStream API, and the account's "not enabled", into this error; its
  // public module does not export the class.
  if (error.name === 'JetStreamNotEnabled') return 'no_jetstream';
  if (error instanceof JetStreamApiError) {
    if (error.code === JETSTREAM_NOT_ENABLED) return 'no_jetstream';
    // Every other API error is final.
    return UNREACHABLE_API_CODES.has(error.code) ? 'unreachable' : 'final';
  }
  return CONNECTION_ERRORS.has(error.name) ? 'unreachable' : 'final';
}

/**
 * Runs a start-up call to JetStream (setting up a stream, a bucket, a consumer), trying it again with backoff
 * while NATS cannot be reached or JetStream is not ready, and logging each wait at `warn`. Gives up with
 * `jetstream_unavailable` after `outageMs`, or after `noJetStreamMs` of answers that the server has no JetStream.
 * Any other failure (an API error such as overlapping subjects, a closed connection) is thrown at once, as is; a
 * wait ends with `closed` as soon as the bus starts to close or drain, so a stop never waits out an outage here.
 *
 * @example
 * const info = await untilReachable(bus, 'stream TASKS', () => jsm.streams.info('TASKS'), { outageMs: 60_000 });
 */
export async function untilReachable<T>(
  bus: JetStreamBus,
  what: string,
  op: () => Promise<T>,
  opts: UntilReachableOptions = {},
): Promise<T> {
  const outageMs = opts.outageMs ?? DEFAULT_OUTAGE_MS;
  const noJetStreamMs = opts.noJetStreamMs ?? DEFAULT_NO_JETSTREAM_MS;
  const started = performance.now();
  let noJetStreamSince: number | undefined;
  let waits = 0;
  try {
    const result = await pRetry(() => op(), {
      ...BACKOFF,
      // A wait ends when the bus closes or drains (a stop); a bus closed already fails the first attempt itself.
      ...(bus.closing.aborted ? {} : { signal: bus.closing }),
      retries: Number.POSITIVE_INFINITY,
      maxRetryTime: outageMs,
      shouldRetry: ({ error, attemptNumber, retriesConsumed }) => {
        const failure = failureOf(error);
        if (failure === 'final' || failure === 'refused') return false;
        const now = performance.now();
        noJetStreamSince = failure === 'no_jetstream' ? (noJetStreamSince ?? now) : undefined;
        const givesUpInMs = Math.min(
          outageMs - (now - started),
          noJetStreamSince === undefined
            ? Number.POSITIVE_INFINITY
            : noJetStreamMs - (now - noJetStreamSince),
        );
        if (givesUpInMs <= 0) return false;
        // The delay p-retry is about to wait, by its own formula, so the log line can say it.
        const retryInMs = Math.min(
          BACKOFF.minTimeout * BACKOFF.factor ** retriesConsumed,
          BACKOFF.maxTimeout,
          outageMs - (now - started),
        );
        waits++;
        bus.logger.warn(
          {
            waitingFor: what,
            server: bus.server,
            err: error,
            attempt: attemptNumber,
            retryInMs: Math.round(retryInMs),
            givesUpInMs: Math.round(givesUpInMs),
          },
          `waiting for JetStream: ${what}: ${error.message}; trying again in ${Math.round(retryInMs)} ms ` +
            `(giving up in ${Math.ceil(givesUpInMs / 1000)} s)`,
        );
        return true;
      },
    });
    if (waits > 0)
      bus.logger.info({ waitingFor: what, waits }, `JetStream answered after ${waits} wait(s): ${what}`);
    return result;
  } catch (error) {
    if (error === bus.closing.reason) {
      throw new TransportError(
        'closed',
        `stopped waiting for JetStream (${what}): the NATS connection was closed`,
        {
          cause: error,
        },
      );
    }
    throw givenUp(bus, what, error, outageMs);
  }
}

function givenUp(bus: JetStreamBus, what: string, error: unknown, outageMs: number): unknown {
  const server = bus.server;
  const failure = failureOf(error);
  if (failure === 'refused') {
    return new TransportError(
      'permission_denied',
      `the NATS server at ${server} refused this client's user (${what}): ${errorMessage(error)}. ` +
        'Its permissions do not allow it; docs/permissions.md lists what each role may do.',
      { cause: error },
    );
  }
  if (failure === 'no_jetstream') {
    return new TransportError(
      'jetstream_unavailable',
      `JetStream is not available on the NATS server at ${server}: ${errorMessage(error)}. ` +
        'Start nats-server with -js (JetStream enabled).',
      { cause: error },
    );
  }
  if (failure === 'unreachable') {
    return new TransportError(
      'jetstream_unavailable',
      `gave up waiting for JetStream on the NATS server at ${server} (${what}) after ${Math.round(outageMs / 1000)} s: ` +
        `${errorMessage(error)}. Check that nats-server is running and reachable.`,
      { cause: error },
    );
  }
  return error;
}
