import type { AgentStepReply, AgentStepRequest, StepHeartbeat, WorkspaceManifest } from '@troupe/protocol';
import { type Bus, type Clock, type LocalSteps, type Logger, TransportError } from '@troupe/runtime';
import { assign, fromPromise, type PromiseActorLogic, setup } from 'xstate';
import { runFactsOf, steeringOf } from '../task/runContext.ts';
import type { SendsInFlight } from './sendsInFlight.ts';
import { withCallCheckpoints } from './stepCallCheckpoint.ts';
import { heldDeadline, pastDeadlineReply } from './stepCallDeadline.ts';
import { failureOf, type StepCallFailure, timedOut } from './stepCallFailure.ts';
import { holdLogic } from './stepCallHold.ts';
import { pauseLogic } from './stepCallPause.ts';
import { backoff, startingContext, stepCallActions, stepCallGuards } from './stepCallRules.ts';
import { stepSendLogic } from './stepCallSend.ts';
import type { StepRunInput, StepRunOutput } from './workflowTypes.ts';

export type { StepCallFailure } from './stepCallFailure.ts';

/** What a step call needs besides its step: the same for every step of a pipeline, built into its logic once. */
export interface StepCallServices {
  bus: Bus;
  clock: Clock;
  logger?: Logger | undefined;
  /** How long to keep trying while no worker serves the agent (workers may still be starting). */
  waitForWorkersMs: number;
  /** How often the agent host must report on the step. */
  heartbeatMs: number;
  /**
   * The agent hosts of this process: a step one of them takes runs here with no NATS hop (see `LocalSteps`); one
   * none takes (no host here serves its agent at its version, or all are full or stopping) goes over NATS.
   */
  local?: LocalSteps | undefined;
  /**
   * The runner's sends in flight, when its tasks may be passivated: a call restored from a passivated task's snapshot
   * adopts its send under way from here (see `sendsInFlight.ts`).
   */
  sends?: SendsInFlight | undefined;
}

/** What the step call starts from: the workflow's step, and whether a run of it may have started before. */
export interface StepCallInput extends StepRunInput {
  /** The step was sent before this call began (it resumes a checkpoint of before the upgrade): no send is `fresh`. */
  resumed?: boolean;
}

/**
 * What the step call hears: from its request (each heartbeat, then the reply or the request's failure), from the
 * connection (a reconnect, after which a reply in flight may be lost), from its pause (time to send again), and
 * from the task's steering (held by `troupe pause`, let go by `troupe resume`).
 */
export type StepCallEvent =
  | { type: 'heartbeat'; heartbeat: StepHeartbeat }
  | { type: 'replied'; reply: AgentStepReply }
  | { type: 'failed'; error: unknown }
  | { type: 'reconnect' }
  | { type: 'resume' }
  /** The task is held (`troupe pause`): the step waits, unsent, until it is let go (`unheld`). */
  | { type: 'held' }
  | { type: 'unheld' }
  /** The task is held, or let go, while its host still works on the step (it waits on a person, say). */
  | { type: 'heldAtWork' }
  | { type: 'unheldAtWork' }
  /** The task's deadline passed while it was held, and its pipeline counts held time (`budget.pausedTimeCounts`). */
  | { type: 'pastDeadline' };

/** The step call's state: plain data only, so a checkpoint of the workflow holds it and a restore goes on from it. */
export interface StepCallContext {
  request: AgentStepRequest;
  /** The subject of the step's agent. */
  subject: string;
  /** How long the step may take in all, from `started` (cut to the task's deadline and its grace). */
  timeoutMs: number;
  /** When the step was first sent, on the services' clock: its timeout and duration count from here, across restores. */
  started: number;
  /** Requests sent so far. */
  attempts: number;
  /** A run of the step may have started before this call's first send (see {@link StepCallInput}). */
  resumed: boolean;
  /** The task's held time counts against its deadline (`budget.pausedTimeCounts`): the deadline stays, and ends it. */
  pausedTimeCounts?: boolean;
  /** Since when no worker answered. */
  noWorkerSince?: number | undefined;
  /** A worker died or lost its journal under this step: wait for another as long as the step may take. */
  takenOver: boolean;
  /**
   * Why the step was last sent again after a run that did not end it (its worker went silent, its journal was out of
   * reach or held a record only a newer host reads): a step that then runs out of time says so, not only that it did.
   */
  resentBecause?: string | undefined;
  /**
   * The step was sent over NATS when a reconnect may have lost its reply: it is sent again over NATS (and so are its
   * later sends), where the host running it may get the resend and join it to its run, and not to a host of this
   * process, which would start a second run of it for certain.
   */
  overNats?: true;
  /** What the step waits on a person for, as its last heartbeat said. */
  waitingFor?: StepHeartbeat['waitingFor'];
  /** Since when the task has held the step (paused): that time is not counted against the step's timeout. */
  heldSince?: number | undefined;
  /**
   * The task's time held in all (its steering's, the pause in force counted so far) when `started` was last moved on
   * by it: the task's held time past this is the step's too. Read from the task's record, which a resume writes, it
   * counts the holds a checkpoint of the call does not show (the call's own changes are checkpointed only with the
   * workflow's). Absent in a call checkpointed before it was kept: `heldSince` alone counts then.
   */
  heldBase?: number | undefined;
  /** What the step was last reported doing, so only a change is passed on. */
  lastActivity: string;
  /** Why the call ended without a reply: what it fails with, once its children have stopped. */
  failure?: StepCallFailure;
  reply?: AgentStepReply;
  /**
   * What its agent spent on the step as of its last `paused` reply (from its journal, every run of the step counted):
   * the step's usage if the task's deadline ends it while held (`budget.pausedTimeCounts`), when no reply says more.
   */
  spent?: Pick<AgentStepReply, 'usage' | 'turns'> | undefined;
  /**
   * The workspace manifest the workflow sent the step with, once a run that did not end the step (its worker stopped,
   * its journal was out of reach) handed on files: the step is sent again with them, and its reply's changes are
   * counted from here.
   */
  workspaceBase?: WorkspaceManifest | undefined;
}

type Ctx = { context: StepCallContext };

/**
 * The step call's logic on `services`: built once per pipeline runner and invoked by the workflow as each agent
 * step's child. It sends the step to its agent over NATS and hears the host's heartbeats and then its reply. While
 * nobody serves the agent it sends again with backoff (`waitingForWorker`), and gives up after `waitForWorkersMs`
 * with a message that says which subject has no worker. When the host goes silent for `MISSED_HEARTBEATS`
 * heartbeats (its process died), or loses its journal, or stops mid-step, the step is sent again with the same id
 * and another worker takes it over from the step's journal; after that, it waits for a worker as long as the step
 * may take. A reconnect sends it again at once (a reply in flight may be lost; the host joins a resend to the run it
 * has). The workflow leaving the step stops the call, and with it the request in flight. While its task is paused
 * nothing is sent (`held`): a step its host stopped for the pause, or one about to be sent, waits for the resume,
 * and its timeout does not count the time held.
 *
 * Its context is plain data, so a checkpoint holds it. Restored, it goes on where it was: a request in flight is sent
 * again under the same step id (the host's journal answers a step already done), a pause waits out what is left of
 * it, and the step's timeout still counts from its first send. Its timers are invoked actors rather than `after:`
 * delays, because XState keeps delayed events out of a persisted snapshot and a restored `after:` never fires. The
 * run's facts (a first delivery's `fresh`, the trace, the pipeline version) and its activity reports go through the
 * task's run context (see `task/runContext.ts`). A checkpoint from before the step call was a machine holds the step
 * as a promise's snapshot: such a step is started afresh from its input.
 *
 * This factory is the chart; its parts are beside it: one send of the step (`stepCallSend.ts`), the conditions and
 * context changes of its transitions (`stepCallRules.ts`), its failures as plain data (`stepCallFailure.ts`), its pause
 * (`stepCallPause.ts`), its wait while the task is held (`stepCallHold.ts`), the task's deadline while it is held
 * (`stepCallDeadline.ts`) and the shape of its checkpoint (`stepCallCheckpoint.ts`).
 *
 * @example
 * ```ts
 * const runStep = createStepCallLogic({ bus, clock, waitForWorkersMs: 30_000, heartbeatMs: 5_000 });
 * const workflow = compileFlow(config, { runStep });
 * ```
 */
export function createStepCallLogic(services: StepCallServices) {
  const { clock } = services;
  const guards = stepCallGuards(services);
  const rules = stepCallActions(services);
  const machine = setup({
    types: {
      context: {} as StepCallContext,
      input: {} as StepCallInput,
      events: {} as StepCallEvent,
      output: {} as StepRunOutput,
    },
    actors: {
      request: stepSendLogic(services),
      /** Ends at once: a macrostep after the call entered `failed`, the one in which it fails (see there). */
      giveUp: fromPromise(async () => undefined),
      pause: pauseLogic(clock),
      hold: holdLogic(clock),
    },
    guards,
    actions: {
      throwFailure: rules.throwFailure,
      countAttempt: assign(rules.countAttempt),
      heard: assign(rules.heard),
      takenOver: assign(rules.takenOver),
      noWorker: assign(rules.noWorker),
      fail: assign(rules.fail),
      carryWorkspace: assign(rules.carryWorkspace),
      keepReply: assign(rules.keepReply),
      keepSpent: assign(rules.keepSpent),
      holdFrom: assign(rules.holdFrom),
      unsent: assign(rules.unsent),
      unhold: assign(rules.unhold),
      // Only a send over NATS hears reconnects (see `stepCallSend.ts`).
      rejoin: assign({ overNats: true as const }),
    },
  }).createMachine({
    id: 'stepCall',
    context: ({ input, self }) => startingContext(clock, input, steeringOf(self.system)),
    initial: 'calling',
    states: {
      /**
       * Talking to the agent: sending, waiting for the reply, or pausing before sending again. (A checkpoint from
       * before the send heard reconnects itself holds a `connection` child here: no logic has that name now, so
       * XState leaves it out of the restored call.)
       */
      calling: {
        initial: 'sending',
        states: {
          /** About to send (again): within the step's time, or it has run out. */
          sending: {
            always: [
              {
                guard: 'outOfTime',
                target: '#stepCall.failed',
                actions: { type: 'fail', params: ({ context }: Ctx) => timedOut(context) },
              },
              { target: 'sent' },
            ],
          },
          sent: {
            entry: 'countAttempt',
            invoke: {
              src: 'request',
              input: ({ context, self }) => ({
                request: context.request,
                subject: context.subject,
                started: context.started,
                timeoutMs: context.timeoutMs,
                pausedTimeCounts: context.pausedTimeCounts === true,
                heldBase: context.heldBase,
                // A resend may follow a run of the step; so may any send of a later delivery.
                fresh:
                  context.attempts === 1 &&
                  !context.resumed &&
                  runFactsOf(self.system)?.firstDelivery === true,
                quiet: context.noWorkerSince !== undefined,
                ...(context.overNats ? { overNats: true } : {}),
              }),
            },
            on: {
              heartbeat: { actions: { type: 'heard', params: ({ event }) => event.heartbeat } },
              reconnect: { target: 'sending', reenter: true, actions: 'rejoin' },
              // The task is held: the send did not go out (see `stepCallSend.ts`), so it is no attempt.
              held: { target: 'held', actions: 'unsent' },
              // Held while its host works on (a person's answer ends its call): the request's timeout is held too
              // (see `stepCallSend.ts`), and the step's own time stops from the pause until it is let go.
              heldAtWork: { actions: 'holdFrom' },
              unheldAtWork: { actions: 'unhold' },
              pastDeadline: {
                target: '#stepCall.replied',
                actions: { type: 'keepReply', params: ({ context }) => pastDeadlineReply(context) },
              },
              replied: [
                {
                  // Its agent stopped after its current call, since the task was paused: held until it is resumed.
                  guard: { type: 'pausedReply', params: ({ event }) => event.reply },
                  target: 'held',
                  actions: [
                    { type: 'carryWorkspace', params: ({ event }) => event.reply },
                    { type: 'keepSpent', params: ({ event }) => event.reply },
                  ],
                },
                {
                  // The host could not reach the step journal (NATS trouble): the step goes again once it can.
                  guard: { type: 'journalUnavailable', params: ({ event }) => event.reply },
                  target: 'backingOff',
                  actions: [
                    { type: 'carryWorkspace', params: ({ event }) => event.reply },
                    {
                      type: 'takenOver',
                      params: ({ context, event }) =>
                        `step ${context.request.stepId} stopped: ${event.reply.ok ? '' : event.reply.error.message}; sending it again`,
                    },
                  ],
                },
                {
                  guard: { type: 'final', params: ({ event }) => event.reply },
                  target: '#stepCall.replied',
                  actions: { type: 'keepReply', params: ({ event }) => event.reply },
                },
                // Its worker stopped mid-step: another worker may take the step, as when none served the agent.
                {
                  target: 'waitingForWorker',
                  actions: [{ type: 'carryWorkspace', params: ({ event }) => event.reply }, 'noWorker'],
                },
              ],
              failed: [
                {
                  guard: {
                    type: 'failedWith',
                    params: ({ event }) => ({ error: event.error, code: 'timeout' }),
                  },
                  target: '#stepCall.failed',
                  actions: { type: 'fail', params: ({ context }) => timedOut(context) },
                },
                {
                  guard: {
                    type: 'failedWith',
                    params: ({ event }) => ({ error: event.error, code: 'stalled' }),
                  },
                  target: 'sending',
                  reenter: true,
                  actions: {
                    type: 'takenOver',
                    params: ({ context }) =>
                      `the worker running step ${context.request.stepId} went silent; sending the step to another worker`,
                  },
                },
                {
                  guard: {
                    type: 'failedWith',
                    params: ({ event }) => ({ error: event.error, code: 'no_responders' }),
                  },
                  target: 'waitingForWorker',
                  actions: 'noWorker',
                },
                {
                  target: '#stepCall.failed',
                  actions: {
                    type: 'fail',
                    params: ({ context, event }) => failureOf(context, event.error, clock.now()),
                  },
                },
              ],
            },
          },
          /** Nobody serves the agent (yet), or its worker stopped: sent again after a backoff, until the wait is over. */
          waitingForWorker: {
            always: {
              guard: 'gaveUpOnWorkers',
              target: '#stepCall.failed',
              actions: {
                type: 'fail',
                params: ({ context }: Ctx) =>
                  failureOf(
                    context,
                    new TransportError('no_responders', `no one is serving ${context.subject}`),
                    clock.now(),
                  ),
              },
            },
            invoke: {
              src: 'pause',
              input: ({ context }) => ({
                until: clock.now() + backoff(context),
                stepId: context.request.stepId,
              }),
            },
            on: { resume: 'sending' },
          },
          backingOff: {
            invoke: {
              src: 'pause',
              input: ({ context }) => ({
                until: clock.now() + backoff(context),
                stepId: context.request.stepId,
              }),
            },
            on: { resume: 'sending' },
          },
          /**
           * The task is paused: nothing is sent, no heartbeat is awaited, and no timer runs but the task's deadline,
           * when its pipeline counts held time against it (`budget.pausedTimeCounts`): passing, it ends the step
           * with `budget_exceeded`. Let go, the step is sent again under the same id (its journal answers what was
           * done), its timeout moved on by the time held.
           */
          held: {
            entry: 'holdFrom',
            invoke: {
              src: 'hold',
              input: ({ context }) => ({ stepId: context.request.stepId, deadline: heldDeadline(context) }),
            },
            on: {
              unheld: { target: 'sending', actions: 'unhold' },
              pastDeadline: {
                target: '#stepCall.replied',
                actions: { type: 'keepReply', params: ({ context }) => pastDeadlineReply(context) },
              },
            },
          },
        },
      },
      replied: { type: 'final' },
      /**
       * No reply: the call fails, XState's way, with an error thrown in a transition. The actor ends with status
       * `error` and the workflow hears `xstate.error.actor` (its `onError`), with the code of the failure, as it
       * heard a rejected promise. It is thrown one macrostep after entering this state, once its children (the request,
       * the pause) are stopped: XState stops no children of an actor that errors.
       */
      failed: {
        invoke: { src: 'giveUp', onDone: { actions: 'throwFailure' } },
      },
    },
    output: ({ context }): StepRunOutput => ({
      ...(context.reply as AgentStepReply),
      durationMs: Math.max(0, clock.now() - context.started),
    }),
  });
  return withCallCheckpoints(machine);
}

/** The step call's logic, as {@link createStepCallLogic} builds it. */
export type StepCallLogic = ReturnType<typeof createStepCallLogic>;

/**
 * What a workflow invokes for a step an agent answers: the step call, or a stand-in that answers the step itself (a
 * replay runs the agent in this process, a test answers from a script), ending with the reply or failing, as the
 * step call does. (XState's logic types are invariant, so the two are named side by side.)
 */
export type StepCallActorLogic = StepCallLogic | PromiseActorLogic<StepRunOutput, StepRunInput>;
