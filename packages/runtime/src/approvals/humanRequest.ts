import type { DecisionReceipt, ErrorReply, HumanRequest } from '@troupe/protocol';
import { assign, fromPromise, setup } from 'xstate';
import type { KeyValue } from '../durable/kvStore.ts';
import type { Clock } from '../events/clock.ts';
import type { Logger } from '../logging/index.ts';
import type { Delivery } from '../transport/bus.ts';

/** A person's reply: a decision on an approval, or an answer to a question. */
export type HumanReply = { by?: string | undefined } & Record<string, unknown>;

/** How a request ended for the step that waited on it; `T` is the reply, typed by the caller's schema. */
export type HumanOutcome<T extends { by?: string | undefined } = HumanReply> =
  /** `stored`: the decision is in KV (a receipt was given, or it was written there while nobody listened). */
  | { kind: 'decided'; value: T; by?: string; stored?: boolean }
  | { kind: 'expired' }
  /** The step stopped while the request waited, and will not wait on it again. */
  | { kind: 'closed'; why: string };

export interface HumanRequestInput {
  /** The request as recorded, pending, at `pendingRevision`: a decision replaces only that, so one decision wins. */
  record: HumanRequest;
  pendingRevision: number;
  /** What the receipt tells the person the waiting call now does. */
  outcomeOf: (value: HumanReply) => DecisionReceipt['outcome'];
  /** A decision already in a record (written by `troupe approve` while nobody listened), if any. */
  storedValue: (record: HumanRequest) => HumanReply | undefined;
  /** The record of a request once decided, answered or expired. */
  closedRecord: (record: HumanRequest, outcome: HumanOutcome, now: number) => HumanRequest;
  /**
   * Opens (`true`) or closes (`false`) the request's subject, whose replies its gate tells it as `reply`: open only
   * while it waits for one, so a reply while another is being recorded, or after it settled, finds nobody listening.
   */
  listen: (open: boolean) => void;
  /** The pipeline's requests (keys without the pipeline). */
  store: KeyValue<HumanRequest>;
  clock: Clock;
  logger: Logger;
  /** Its task is paused as it starts: it does not run out until a `letGo` (see {@link HumanRequestEvent}). */
  holdAsked?: boolean;
}

/**
 * What a waiting request hears: a person's reply on its subject, a decision written to its record in KV, and the
 * step stopping (`why` says how).
 */
export type HumanRequestEvent =
  | { type: 'reply'; delivery: Delivery<HumanReply> }
  | { type: 'storedDecision'; value: HumanReply }
  | { type: 'stop'; why: string }
  /**
   * Its task was paused (`hold`) or resumed (`letGo`): held, it does not run out and stays answerable; let go, it has
   * the time it had left when held. Each is recorded in its KV record (`held`, then a new `expiresAt`), so people
   * answering elsewhere, and a run that takes the request up after a crash, see it.
   */
  | { type: 'hold' }
  | { type: 'letGo' };

interface HumanRequestContext extends HumanRequestInput {
  outcome?: HumanOutcome;
  /** The reply being recorded. */
  delivery?: Delivery<HumanReply> | undefined;
  /** The step stopped while a reply was being recorded: settled once that is done. */
  stoppedBecause?: string;
  /** A decision seen in KV while a reply was being recorded. */
  storedMeanwhile?: HumanReply;
  /** A reply that came while the record was being held or let go: recorded once that write is done. */
  replyMeanwhile?: Delivery<HumanReply> | undefined;
}

/** The record held (its time left as of `now`) or let go (its time left from `now` on), as `holdAsked` says. */
function heldOrLetGo(record: HumanRequest, hold: boolean, now: number): HumanRequest {
  return hold ? heldRecord(record, now) : letGoRecord(record, now);
}

/** A pending request's record held from `since`: it keeps the time it had left then, and does not run out. */
export function heldRecord(record: HumanRequest, since: number): HumanRequest {
  const leftMs = Math.max(0, Math.round(Date.parse(record.expiresAt) - since));
  return { ...record, held: { since: new Date(since).toISOString(), leftMs } };
}

/** A held request's record let go at `now`: it runs out the time it had left when held from `now` on. */
export function letGoRecord(record: HumanRequest, now: number): HumanRequest {
  const { held, ...rest } = record;
  return { ...rest, expiresAt: new Date(now + (held?.leftMs ?? 0)).toISOString() };
}

/** How many times a reply is written over a pending record that another writer changed meanwhile (held or let go). */
const RECORD_ATTEMPTS = 3;

/** What writing a reply over the pending record came to: its revision (0: not stored), or the decision that won. */
interface Recorded {
  written?: number;
  stored?: HumanReply;
}

/** A decision as an outcome; `stored` when it is in KV. */
export function decidedFrom<T extends { by?: string | undefined }>(
  value: T,
  stored: boolean,
): { kind: 'decided'; value: T; by?: string; stored: boolean } {
  return { kind: 'decided', value, stored, ...(value.by ? { by: value.by } : {}) };
}

/**
 * One request to a person, from the moment it is recorded pending until it is settled, as an actor:
 *
 * - `waiting`: listening on `troupe.approvals.<pipeline>.<taskId>.<id>` (through its gate, see `listen`) for one valid
 *   reply, until the request's `expiresAt` (on the clock) or the step stopping;
 * - `deciding`: the reply is being written to the request's record (only over the pending revision, so one
 *   decision wins); then the person gets a receipt, or `already_decided` when a decision reached KV first. The
 *   subject is closed meanwhile: a second reply finds nobody listening. The deadline and the step stopping wait for
 *   the write, so the agent, the record and the receipt agree.
 * - `settled` (final): decided, expired, or closed; its output is how.
 *
 * All along, a decision written to the record in KV (by `troupe approve` while no process listened) settles it too:
 * its gate reads the record on one timer for all its requests (`recordWatch.ts`) and tells it `storedDecision`.
 */
export const humanRequestMachine = setup({
  types: {
    context: {} as HumanRequestContext,
    input: {} as HumanRequestInput,
    events: {} as HumanRequestEvent,
    output: {} as HumanOutcome,
  },
  actors: {
    /**
     * Writes the reply over the pending record (as it is now, if held or let go since): its revision; undefined when
     * another decision got there first, with that decision when the record holds one (as it does when `troupe
     * approve` or the gateway recorded the reply before telling the step).
     */
    record: fromPromise<Recorded, HumanRequestContext>(async ({ input }) => {
      const value = input.delivery?.value as HumanReply;
      let pending = { record: input.record, revision: input.pendingRevision };
      for (let attempt = 1; ; attempt++) {
        const decided = input.closedRecord(pending.record, decidedFrom(value, false), input.clock.now());
        const written = await input.store
          .update(input.record.id, decided, pending.revision)
          .catch((error: unknown) => {
            input.logger.warn(
              { err: error, id: input.record.id },
              'cannot record the decision; it applies to this run only',
            );
            return 0;
          });
        if (written !== undefined) return { written };
        const current = await input.store.get(input.record.id).catch(() => undefined);
        const stored = current === undefined ? undefined : input.storedValue(current.value);
        if (stored !== undefined) return { stored };
        // Still pending: held or let go meanwhile by another writer than this one (the coordinator holds a task's
        // requests as it records its pause, and lets them go at its resume), not decided. The reply is the decision.
        if (current?.value.status !== 'pending' || attempt >= RECORD_ATTEMPTS) return {};
        pending = { record: current.value, revision: current.revision };
      }
    }),
    /**
     * Holds or lets go of the record, over the pending revision. Lost to a decision, the watch brings that; lost to
     * the coordinator's hold or let-go of the same record (it holds the task's requests as it records the pause), the
     * request goes on from the record as it is now, written again only if it is not yet as asked. Not written at all
     * (KV unreachable), the hold still holds here.
     */
    holdOrLetGo: fromPromise<{ record: HumanRequest; revision: number }, HumanRequestContext>(
      async ({ input }) => {
        const { id } = input.record;
        const record = heldOrLetGo(input.record, input.holdAsked === true, input.clock.now());
        try {
          const written = await input.store.update(id, record, input.pendingRevision);
          if (written !== undefined) return { record, revision: written };
          const current = await input.store.get(id);
          if (current?.value.status === 'pending')
            return { record: current.value, revision: current.revision };
        } catch (error) {
          input.logger.warn({ err: error, id }, 'cannot record the request held or let go');
        }
        return { record, revision: input.pendingRevision };
      },
    ),
  },
  delays: {
    expiry: ({ context }) => Math.max(0, Date.parse(context.record.expiresAt) - context.clock.now()),
  },
  actions: {
    receipt: ({ context }) => {
      const value = context.delivery?.value as HumanReply;
      context.delivery?.respond({
        ok: true,
        id: context.record.id,
        outcome: context.outcomeOf(value),
      } satisfies DecisionReceipt);
    },
    alreadyDecided: ({ context }) =>
      context.delivery?.respond({
        ok: false,
        error: {
          code: 'already_decided',
          message: `${context.record.kind} ${context.record.id} was already decided`,
        },
      } satisfies ErrorReply),
  },
  guards: {
    lost: (_, recorded: Recorded) => recorded.written === undefined,
    stopped: ({ context }) => context.stoppedBecause !== undefined,
    decided: ({ context }) => context.outcome !== undefined,
    isHeld: ({ context }) => context.record.held !== undefined,
    holdChanged: ({ context }) => (context.holdAsked === true) !== (context.record.held !== undefined),
    repliedMeanwhile: ({ context }) => context.replyMeanwhile !== undefined,
  },
}).createMachine({
  id: 'humanRequest',
  context: ({ input }) => ({ ...input }),
  initial: 'open',
  states: {
    open: {
      on: {
        storedDecision: {
          target: 'settled',
          actions: assign({ outcome: ({ event }) => decidedFrom(event.value, true) }),
        },
      },
      initial: 'waiting',
      states: {
        waiting: {
          entry: ({ context }) => context.listen(true),
          exit: ({ context }) => context.listen(false),
          // Back from a decision that lost to one in KV, after the step stopped meanwhile.
          always: {
            guard: 'stopped',
            target: '#humanRequest.settled',
            actions: assign({
              outcome: ({ context }) => ({ kind: 'closed', why: context.stoppedBecause ?? '' }),
            }),
          },
          on: {
            reply: { target: 'deciding', actions: assign({ delivery: ({ event }) => event.delivery }) },
            stop: {
              target: '#humanRequest.settled',
              actions: assign({ outcome: ({ event }) => ({ kind: 'closed', why: event.why }) }),
            },
            hold: { actions: assign({ holdAsked: true }) },
            letGo: { actions: assign({ holdAsked: false }) },
          },
          initial: 'sorting',
          states: {
            sorting: { always: [{ guard: 'isHeld', target: 'held' }, { target: 'running' }] },
            /** Running out at `expiresAt`, on the clock. */
            running: {
              always: { guard: 'holdChanged', target: 'recordingHold' },
              after: {
                expiry: {
                  target: '#humanRequest.settled',
                  actions: assign({ outcome: { kind: 'expired' } }),
                },
              },
            },
            /** Its task is paused: no deadline runs; a reply is taken as ever. */
            held: { always: { guard: 'holdChanged', target: 'recordingHold' } },
            /** Writing `held`, or the new `expiresAt`, over the pending revision; a reply meanwhile waits for it. */
            recordingHold: {
              invoke: {
                src: 'holdOrLetGo',
                input: ({ context }) => context,
                onDone: [
                  {
                    guard: 'repliedMeanwhile',
                    target: '#humanRequest.open.deciding',
                    actions: assign(({ context, event }) => ({
                      record: event.output.record,
                      pendingRevision: event.output.revision,
                      delivery: context.replyMeanwhile,
                      replyMeanwhile: undefined,
                    })),
                  },
                  {
                    target: 'sorting',
                    actions: assign(({ event }) => ({
                      record: event.output.record,
                      pendingRevision: event.output.revision,
                    })),
                  },
                ],
              },
              on: {
                reply: { actions: assign({ replyMeanwhile: ({ event }) => event.delivery }) },
                stop: { actions: assign({ stoppedBecause: ({ event }) => event.why }) },
              },
            },
          },
        },
        /** A decision got to KV first: it settles the request, now if it was seen, else when the watch brings it. */
        lost: {
          always: [{ guard: 'decided', target: '#humanRequest.settled' }, { target: 'waiting' }],
        },
        deciding: {
          invoke: {
            src: 'record',
            input: ({ context }) => context,
            onDone: [
              {
                // Decided meanwhile through KV: that decision stands.
                guard: { type: 'lost', params: ({ event }) => event.output },
                actions: [
                  'alreadyDecided',
                  assign({
                    outcome: ({ context, event }) => {
                      const stored = context.storedMeanwhile ?? event.output.stored;
                      return stored ? decidedFrom(stored, true) : undefined;
                    },
                  }),
                ],
                target: 'lost',
              },
              {
                target: '#humanRequest.settled',
                actions: [
                  'receipt',
                  assign({
                    outcome: ({ context, event }) =>
                      decidedFrom(context.delivery?.value as HumanReply, event.output.written !== 0),
                  }),
                ],
              },
            ],
          },
          on: {
            stop: { actions: assign({ stoppedBecause: ({ event }) => event.why }) },
            // Ours, or the one that beat ours: the write's result says which.
            storedDecision: { actions: assign({ storedMeanwhile: ({ event }) => event.value }) },
            hold: { actions: assign({ holdAsked: true }) },
            letGo: { actions: assign({ holdAsked: false }) },
          },
        },
      },
    },
    settled: { type: 'final' },
  },
  output: ({ context }) => context.outcome ?? { kind: 'expired' },
});
