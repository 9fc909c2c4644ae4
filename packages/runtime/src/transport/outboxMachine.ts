import { assign, fromPromise, setup } from 'xstate';

/**
 * What the event outbox's lifecycle hears: the connection's changes, how a probe for the `EVENTS` stream and the
 * sends went, and its owner stopping it.
 */
export type OutboxEvent =
  /** There are events to send (the first, while `idle`). */
  | { type: 'pending' }
  | { type: 'disconnect' }
  | { type: 'reconnect' }
  /** A send failed for want of the stream or an ack; `probe` when it should be looked for again first. */
  | { type: 'sendFailed'; error: unknown; probe: boolean }
  /** An event was stored: after failures, the backoff starts over. */
  | { type: 'stored' }
  | { type: 'stop' };

/** Without a stream, how often to look again whether one has been created. */
export const RECHECK_MS = 30_000;

export interface OutboxMachineInput {
  retryDelayMs: number;
  maxRetryDelayMs: number;
  /** Looks for the `EVENTS` stream; rejects with the server's answer when there is none (or no answer). */
  probe: () => Promise<unknown>;
  /** Why no stream can store events, when `error` says so (a missing stream, no JetStream); else undefined. */
  unstoredReason: (error: unknown, sawStream: boolean) => string | undefined;
  /** Told when events cannot be stored and go out as plain messages; once. */
  onUnstored: (why: string) => void;
  /** Told before each wait, with its length. */
  onBackoff: (error: unknown, delayMs: number) => void;
  /** Told when events are stored again after failures. */
  onRecovered: () => void;
  /** Jitter in [0, 1); `Math.random` in production. */
  random: () => number;
  /** Whether events wait to be sent: after a backoff with none, the outbox goes idle until the next. */
  hasPending: () => boolean;
}

interface OutboxContext extends OutboxMachineInput {
  /** Failed rounds in a row, for the backoff. */
  failures: number;
  /** The wait before the next round, once a round failed. */
  retryInMs: number;
  /** The stream has stored an event of ours (a server without JetStream now is most likely restarting). */
  sawStream: boolean;
  warnedUnstored: boolean;
  /** Look for the stream again before sending (after the wait, or on reconnecting). */
  probeNext: boolean;
}

/** Sending resumes: probing first when the last failure (or a plain-sending past) asked for it, else streaming. */
const resume = [{ guard: 'probeNext', target: 'probing' }, { target: 'streaming' }] as const;

/** A probe's failure, as `onError` gets it. */
type Failed = { event: { error: unknown } };

/**
 * The lifecycle of the event outbox (see `EventOutbox`), apart from its queue:
 *
 * - `idle`: nothing to send (none yet, or none left after a backoff); the next event starts a probe (a connection
 *   that never publishes one never asks).
 * - `probing`: looking whether the `EVENTS` stream exists; events wait.
 * - `streaming`: events go through JetStream and wait for its ack.
 * - `plain`: no stream stores events; they go out as plain messages, and every {@link RECHECK_MS} the stream is
 *   looked for again.
 * - `backingOff`: a probe or a send failed; after a jittered wait that doubles with each failure in a row (up to
 *   `maxRetryDelayMs`), or at once on a reconnect, sending resumes (probing first when the failure asked for it).
 * - `disconnected`: nothing goes out until `reconnect`, which sends what was held (probing first when the stream
 *   was not known to exist: the server may have restarted with a stream, or without one).
 * - `stopped`: final.
 *
 * Timers (`after`) run on the actor's clock, so tests drive the backoff in simulated time.
 */
export const outboxMachine = setup({
  types: {
    context: {} as OutboxContext,
    input: {} as OutboxMachineInput,
    events: {} as OutboxEvent,
  },
  actors: {
    probe: fromPromise<unknown, { probe: () => Promise<unknown> }>(({ input }) => input.probe()),
  },
  delays: {
    backoff: ({ context }) => context.retryInMs,
    recheck: RECHECK_MS,
  },
  guards: {
    unstored: ({ context }, error: unknown) => context.unstoredReason(error, context.sawStream) !== undefined,
    probeNext: ({ context }) => context.probeNext,
    nothingPending: ({ context }) => !context.hasPending(),
  },
  actions: {
    failed: assign(({ context }, p: { error: unknown; probe: boolean }) => {
      const base = Math.min(context.maxRetryDelayMs, context.retryDelayMs * 2 ** context.failures);
      const retryInMs = Math.round(base * (0.8 + context.random() * 0.4));
      context.onBackoff(p.error, retryInMs);
      return { failures: context.failures + 1, retryInMs, probeNext: context.probeNext || p.probe };
    }),
    stored: assign(({ context }) => {
      if (context.failures > 0) context.onRecovered();
      return { failures: 0, sawStream: true };
    }),
    warnUnstored: assign(({ context }, error: unknown) => {
      if (!context.warnedUnstored) context.onUnstored(context.unstoredReason(error, context.sawStream) ?? '');
      return { warnedUnstored: true };
    }),
    probeNext: assign({ probeNext: true }),
  },
}).createMachine({
  id: 'eventOutbox',
  context: ({ input }) => ({
    ...input,
    failures: 0,
    retryInMs: 0,
    sawStream: false,
    warnedUnstored: false,
    probeNext: false,
  }),
  initial: 'idle',
  on: {
    disconnect: '.disconnected',
    stop: '.stopped',
  },
  states: {
    idle: {
      on: {
        pending: 'probing',
        disconnect: { target: 'disconnected', actions: 'probeNext' },
      },
    },
    probing: {
      entry: assign({ probeNext: false }),
      invoke: {
        src: 'probe',
        input: ({ context }) => ({ probe: context.probe }),
        onDone: { target: 'streaming', actions: 'stored' },
        onError: [
          {
            guard: { type: 'unstored', params: ({ event }: Failed) => event.error },
            target: 'plain',
            actions: { type: 'warnUnstored', params: ({ event }: Failed) => event.error },
          },
          {
            target: 'backingOff',
            actions: { type: 'failed', params: ({ event }) => ({ error: event.error, probe: true }) },
          },
        ],
      },
      on: {
        // The probe in flight belongs to the old connection: ask again on this one.
        reconnect: { target: 'probing', reenter: true },
        disconnect: { target: 'disconnected', actions: 'probeNext' },
      },
    },
    streaming: {
      on: {
        sendFailed: {
          target: 'backingOff',
          actions: { type: 'failed', params: ({ event }) => ({ error: event.error, probe: event.probe }) },
        },
        stored: { actions: 'stored' },
      },
    },
    plain: {
      after: { recheck: 'probing' },
      on: { disconnect: { target: 'disconnected', actions: 'probeNext' } },
    },
    backingOff: {
      after: {
        backoff: [
          // Nothing to send: no more rounds (and no more warnings) until there is.
          { guard: 'nothingPending', target: 'idle', actions: assign({ failures: 0 }) },
          ...resume,
        ],
      },
      on: { reconnect: resume },
    },
    disconnected: {
      on: {
        reconnect: resume,
      },
    },
    stopped: { type: 'final' },
  },
});
