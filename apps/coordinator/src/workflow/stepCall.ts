import type { StepActivity } from '@troupe/protocol';
import {
  AgentStepReply,
  type AgentStepRequest,
  applyWorkspaceChanges,
  isRetryable,
  StepHeartbeat,
  subjects,
  type WorkspaceManifest,
  workspaceDiff,
} from '@troupe/protocol';
import {
  type Bus,
  type Clock,
  type Logger,
  type MessageLogLevel,
  requestWithHeartbeats,
  stepTimeoutError,
  TransportError,
  type TransportErrorCode,
} from '@troupe/runtime';
import {
  type ActorSystem,
  assign,
  type CallbackActorLogic,
  type CallbackSnapshot,
  fromCallback,
  fromPromise,
  type PromiseActorLogic,
  type Snapshot,
  setup,
} from 'xstate';
import { reportActivity, runFactsOf } from '../task/runContext.ts';
import type { StepRunInput, StepRunOutput } from './workflowTypes.ts';

/** How long past a step's timeout the workflow waits for the agent's own account of it before giving up. */
export const REPLY_GRACE_MS = 2_000;
/** Heartbeats in a row a step may miss before it goes to another worker. */
export const MISSED_HEARTBEATS = 3;
/** How much longer than the task's deadline a step waits for the agent's own account of running out. */
export const DEADLINE_GRACE_MS = 5_000;

/** What a step call needs besides its step: the same for every step of a pipeline, built into its logic once. */
export interface StepCallServices {
  bus: Bus;
  clock: Clock;
  logger?: Logger | undefined;
  /** How long to keep trying while no worker serves the agent (workers may still be starting). */
  waitForWorkersMs: number;
  /** How often the agent host must report on the step. */
  heartbeatMs: number;
}

/** Why a call ended without a reply, as plain data (it is part of a checkpoint); `code` when a transport code said it. */
export interface StepCallFailure {
  code?: TransportErrorCode;
  message: string;
}

/** What the step call starts from: the workflow's step, and whether a run of it may have started before. */
export interface StepCallInput extends StepRunInput {
  /** The step was sent before this call began (it resumes a checkpoint of before the upgrade): no send is `fresh`. */
  resumed?: boolean;
}

/**
 * What the step call hears: from its request (each heartbeat, then the reply or the request's failure), from the
 * connection (a reconnect, after which a reply in flight may be lost), and from its pause (time to send again).
 */
export type StepCallEvent =
  | { type: 'heartbeat'; heartbeat: StepHeartbeat }
  | { type: 'replied'; reply: AgentStepReply }
  | { type: 'failed'; error: unknown }
  | { type: 'reconnect' }
  | { type: 'resume' };

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
  /** Since when no worker answered. */
  noWorkerSince?: number | undefined;
  /** A worker died or lost its journal under this step: wait for another as long as the step may take. */
  takenOver: boolean;
  /** What the step waits on a person for, as its last heartbeat said. */
  waitingFor?: StepHeartbeat['waitingFor'];
  /** What the step was last reported doing, so only a change is passed on. */
  lastActivity: string;
  /** Why the call ended without a reply: what it fails with, once its children have stopped. */
  failure?: StepCallFailure;
  reply?: AgentStepReply;
  /**
   * The workspace manifest the workflow sent the step with, once a run that did not end the step (its worker stopped,
   * its journal was out of reach) handed on files: the step is sent again with them, and its reply's changes are
   * counted from here.
   */
  workspaceBase?: WorkspaceManifest | undefined;
}

/** What one send of the step is given: plain data, so a restored send goes out again the same way. */
interface RequestInput {
  request: AgentStepRequest;
  subject: string;
  started: number;
  timeoutMs: number;
  /** No run of the step can have started before this send (see `fresh`): the first send of a first delivery. */
  fresh: boolean;
  /** No worker served the agent at the last send: this one is logged at debug (one line said so already). */
  quiet: boolean;
}

/** A promise actor's persisted snapshot: what checkpoints from before the step call was a machine hold for it. */
interface PromiseSnapshot {
  input: StepRunInput;
}

// biome-ignore lint/suspicious/noExplicitAny: xstate types a system by its registered actors, which a provided actor cannot know.
type AnySystem = ActorSystem<any>;
type Ctx = { context: StepCallContext };

/** The wait before sending again: 250 ms, doubling with each request, at most 2 s. */
const backoff = (context: StepCallContext): number => Math.min(250 * 2 ** (context.attempts - 1), 2_000);

/** The step's timeout as its failure: `approval_timeout` when the last heartbeat said a person was being asked. */
function timedOut(context: StepCallContext): StepCallFailure {
  return stepTimeoutError(context.request.agent, context.timeoutMs, context.waitingFor);
}

/** A failure as plain data: a transport failure keeps its code, anything else its message. */
function failureOf(error: unknown): StepCallFailure {
  if (TransportError.is(error)) return { code: error.code, message: error.message };
  return { message: error instanceof Error ? error.message : String(error) };
}

/** The failure as the error the workflow reads its reason from (a `TransportError` when it has a code). */
function errorOf(failure: StepCallFailure | undefined): Error {
  if (!failure) return new Error('step call ended');
  return failure.code ? new TransportError(failure.code, failure.message) : new Error(failure.message);
}

/** The reply with the workspace changes of every run of the step, counted from the manifest the workflow sent. */
function withAllChanges(context: StepCallContext, reply: AgentStepReply): AgentStepReply {
  const base = context.workspaceBase;
  if (base === undefined) return reply;
  const now = reply.workspace
    ? applyWorkspaceChanges(context.request.workspace, reply.workspace)
    : (context.request.workspace ?? {});
  return { ...reply, workspace: workspaceDiff(base, now) };
}

/**
 * The request's logic, restored as never `fresh`: a send restored from a checkpoint goes out again after a run of the
 * step may have started (its host must look in the journal), whatever the send it repeats said.
 */
function restoredUnfresh<Logic extends CallbackActorLogic<StepCallEvent, RequestInput>>(logic: Logic): Logic {
  return {
    ...logic,
    restoreSnapshot: (snapshot: CallbackSnapshot<RequestInput>) => ({
      ...snapshot,
      input: { ...snapshot.input, fresh: false },
    }),
  };
}

/** A snapshot with an input and no state value is a promise's (a machine's always has a `value`). */
const isPromiseSnapshot = (snapshot: Snapshot<unknown>): snapshot is Snapshot<unknown> & PromiseSnapshot =>
  !('value' in snapshot) && 'input' in snapshot;

/**
 * The step call's logic on `services`: built once per pipeline runner and invoked by the workflow as each agent
 * step's child. It sends the step to its agent over NATS and hears the host's heartbeats and then its reply. While
 * nobody serves the agent it sends again with backoff (`waitingForWorker`), and gives up after `waitForWorkersMs`
 * with a message that says which subject has no worker. When the host goes silent for {@link MISSED_HEARTBEATS}
 * heartbeats (its process died), or loses its journal, or stops mid-step, the step is sent again with the same id
 * and another worker takes it over from the step's journal; after that, it waits for a worker as long as the step
 * may take. A reconnect sends it again at once (a reply in flight may be lost; the host joins a resend to the run it
 * has). The workflow leaving the step stops the call, and with it the request in flight.
 *
 * Its context is plain data, so a checkpoint holds it. Restored, it goes on where it was: a request in flight is sent
 * again under the same step id (the host's journal answers a step already done), a pause waits out what is left of
 * it, and the step's timeout still counts from its first send. Its timers are invoked actors rather than `after:`
 * delays, because XState keeps delayed events out of a persisted snapshot and a restored `after:` never fires. The
 * run's facts (a first delivery's `fresh`, the trace, the pipeline version) and its activity reports go through the
 * task's run context (see `task/runContext.ts`). A checkpoint from before the step call was a machine holds the step
 * as a promise's snapshot: such a step is started afresh from its input.
 *
 * @example
 * ```ts
 * const runStep = createStepCallLogic({ bus, clock, waitForWorkersMs: 30_000, heartbeatMs: 5_000 });
 * const workflow = compileFlow(config, { runStep });
 * ```
 */
export function createStepCallLogic(services: StepCallServices) {
  const { bus, clock, logger } = services;
  const timeLeft = (context: Pick<StepCallContext, 'timeoutMs' | 'started'>): number =>
    context.timeoutMs - (clock.now() - context.started);

  /** Reports what the step does now to the task, when it changed; returns what it last reported. */
  const report = (system: AnySystem, context: StepCallContext, kind: StepActivity['kind']): string => {
    const key = `${kind}:${context.waitingFor?.id ?? ''}`;
    if (key === context.lastActivity) return key;
    const { request, waitingFor } = context;
    const where = { step: request.step, agent: request.agent, since: new Date(clock.now()).toISOString() };
    reportActivity(
      system,
      kind === 'person' && waitingFor
        ? { kind, ...where, request: waitingFor }
        : { kind: kind === 'person' ? 'agent' : kind, ...where },
    );
    return key;
  };

  const explain = (context: StepCallContext, error: unknown): StepCallFailure => {
    if (!TransportError.is(error, 'no_responders')) return failureOf(error);
    const waited = context.noWorkerSince === undefined ? 0 : clock.now() - context.noWorkerSince;
    return {
      code: 'no_responders',
      message:
        `no worker serves agent ${context.request.agent} on ${context.subject} (waited ${Math.round(waited / 1000)} s); ` +
        'start `troupe worker` (or `troupe up` without --no-agents) with this pipeline on this NATS server',
    };
  };

  const machine = setup({
    types: {
      context: {} as StepCallContext,
      input: {} as StepCallInput,
      events: {} as StepCallEvent,
      output: {} as StepRunOutput,
    },
    actors: {
      /**
       * One send of the step: its heartbeats, reply or failure, and the connection's reconnects (after one, the reply
       * may have been lost), come back as events; stopping it cancels it. The reconnects are heard here, not by an
       * actor of their own beside it: only a send in flight has a reply to lose, and each actor a parked task keeps
       * costs it about 2 KB of heap.
       */
      request: restoredUnfresh(
        fromCallback<StepCallEvent, RequestInput>(({ input, sendBack, system }) => {
          const left = timeLeft(input);
          // A restored call may find its time spent while it was down: that is the step's timeout, not a send.
          if (left <= 0) {
            sendBack({ type: 'failed', error: new TransportError('timeout', 'the step ran out of time') });
            return;
          }
          const facts = runFactsOf(system);
          const abort = new AbortController();
          let settled = false;
          const stopHearing = bus.onStatus((status) => {
            if (status.type === 'reconnect' && !settled) sendBack({ type: 'reconnect' });
          });
          // While no worker serves the agent the step is sent again every 2 s: one line says so, not each send.
          const logLevel: MessageLogLevel | undefined = input.quiet ? 'debug' : undefined;
          requestWithHeartbeats(
            bus,
            input.subject,
            {
              ...input.request,
              ...(facts
                ? {
                    traceparent: facts.traceparent,
                    ...(facts.version === undefined ? {} : { version: facts.version }),
                  }
                : {}),
              timeoutMs: left,
              heartbeatMs: services.heartbeatMs,
              ...(input.fresh ? { fresh: true as const } : {}),
            },
            AgentStepReply,
            StepHeartbeat,
            {
              // The agent stops itself at `left` and says why (what it waited on); its reply gets a moment to come.
              timeoutMs: left + REPLY_GRACE_MS,
              idleMs: services.heartbeatMs * MISSED_HEARTBEATS,
              signal: abort.signal,
              meta: {
                taskId: input.request.taskId,
                from: input.request.from ?? 'workflow',
                to: input.request.agent,
                kind: 'agent.step',
              },
              clock,
              onHeartbeat: (heartbeat) =>
                sendBack({ type: 'heartbeat', heartbeat: heartbeat as StepHeartbeat }),
              ...(logLevel ? { logLevel } : {}),
            },
          ).then(
            (reply) => {
              settled = true;
              sendBack({ type: 'replied', reply });
            },
            (error: unknown) => {
              settled = true;
              sendBack({ type: 'failed', error });
            },
          );
          // Stopped while the request still waits: its reply subscription is closed (a settled one needs nothing).
          return () => {
            stopHearing();
            if (!settled) abort.abort();
          };
        }),
      ),
      /** Ends at once: a macrostep after the call entered `failed`, the one in which it fails (see there). */
      giveUp: fromPromise(async () => undefined),
      /** A wait until `until` on the clock, then `resume`; a restored one waits only for what is left. */
      pause: fromCallback<StepCallEvent, { until: number }>(({ input, sendBack }) => {
        const timer = clock.setTimeout(
          () => sendBack({ type: 'resume' }),
          Math.max(0, input.until - clock.now()),
        );
        return () => clock.clearTimeout(timer);
      }),
    },
    guards: {
      outOfTime: ({ context }) => timeLeft(context) <= 0,
      journalUnavailable: (_, reply: AgentStepReply) =>
        !reply.ok && reply.error.code === 'journal_unavailable',
      final: (_, reply: AgentStepReply) => reply.ok || !isRetryable(reply.error.code),
      failedWith: (_, p: { error: unknown; code: TransportErrorCode }) => TransportError.is(p.error, p.code),
      gaveUpOnWorkers: ({ context }) =>
        !context.takenOver &&
        context.noWorkerSince !== undefined &&
        clock.now() - context.noWorkerSince >= services.waitForWorkersMs,
    },
    actions: {
      /** The call fails with its failure as the error the workflow reads its reason from (see `failed`). */
      throwFailure: ({ context }) => {
        throw errorOf(context.failure);
      },
      heard: assign(({ context, system }, heartbeat: StepHeartbeat) => {
        const next = { ...context, waitingFor: heartbeat.waitingFor };
        const kind = heartbeat.waitingFor ? 'person' : heartbeat.waitingOnModel ? 'model' : 'agent';
        return { waitingFor: heartbeat.waitingFor, lastActivity: report(system, next, kind) };
      }),
      takenOver: assign(({ context }, why: string) => {
        logger?.warn({ stepId: context.request.stepId, agent: context.request.agent }, why);
        return { takenOver: true, noWorkerSince: undefined };
      }),
      noWorker: assign(({ context, system }) => {
        if (context.noWorkerSince === undefined) {
          logger?.warn(
            { stepId: context.request.stepId, agent: context.request.agent },
            `no worker serves agent ${context.request.agent} yet; step ${context.request.stepId} waits for one (start one with troupe worker <pipeline.yaml>)`,
          );
        }
        const noWorkerSince = context.noWorkerSince ?? clock.now();
        return { noWorkerSince, lastActivity: report(system, { ...context, noWorkerSince }, 'worker') };
      }),
      fail: assign((_, failure: StepCallFailure) => ({ failure })),
      /** A run that did not end the step handed on files: the next run starts from them (and sees what it wrote). */
      carryWorkspace: assign(({ context }, reply: AgentStepReply) => {
        if (!reply.workspace) return {};
        const workspace = applyWorkspaceChanges(context.request.workspace, reply.workspace);
        return {
          request: { ...context.request, workspace },
          workspaceBase: context.workspaceBase ?? context.request.workspace ?? {},
        };
      }),
    },
  }).createMachine({
    id: 'stepCall',
    context: ({ input }) => {
      const { request } = input;
      const started = clock.now();
      // Past the task's deadline the agent stops itself and says so; the call waits a little longer for that reply.
      const deadline = request.budget?.deadline;
      const timeoutMs =
        deadline === undefined
          ? input.timeoutMs
          : Math.min(input.timeoutMs, Math.max(1, deadline - started) + DEADLINE_GRACE_MS);
      return {
        request,
        subject: subjects.agent(request.pipeline, request.agent),
        timeoutMs,
        started,
        attempts: 0,
        resumed: input.resumed === true,
        takenOver: false,
        lastActivity: '',
      };
    },
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
            entry: assign({ attempts: ({ context }) => context.attempts + 1 }),
            invoke: {
              src: 'request',
              input: ({ context, self }) => ({
                request: context.request,
                subject: context.subject,
                started: context.started,
                timeoutMs: context.timeoutMs,
                // A resend may follow a run of the step; so may any send of a later delivery.
                fresh:
                  context.attempts === 1 &&
                  !context.resumed &&
                  runFactsOf(self.system)?.firstDelivery === true,
                quiet: context.noWorkerSince !== undefined,
              }),
            },
            on: {
              heartbeat: { actions: { type: 'heard', params: ({ event }) => event.heartbeat } },
              reconnect: { target: 'sending', reenter: true },
              replied: [
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
                  actions: assign({ reply: ({ context, event }) => withAllChanges(context, event.reply) }),
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
                  actions: { type: 'fail', params: ({ context, event }) => explain(context, event.error) },
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
                  explain(
                    context,
                    new TransportError('no_responders', `no one is serving ${context.subject}`),
                  ),
              },
            },
            invoke: { src: 'pause', input: ({ context }) => ({ until: clock.now() + backoff(context) }) },
            on: { resume: 'sending' },
          },
          backingOff: {
            invoke: { src: 'pause', input: ({ context }) => ({ until: clock.now() + backoff(context) }) },
            on: { resume: 'sending' },
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

  // The send in flight carries the call's own request (`sent` is left whenever the request changes): a checkpoint
  // holds it once, in the call's context, and a restore hands it back to the send it repeats.
  const persistMachine = machine.getPersistedSnapshot;
  machine.getPersistedSnapshot = (snapshot, options) => {
    const persisted = persistMachine(snapshot, options) as PersistedCall;
    return { ...persisted, children: withSends(persisted.children, ({ request: _, ...send }) => send) };
  };
  // A checkpoint from before the upgrade holds the step as a promise's snapshot (its input, no state): start it afresh.
  const restoreMachine = machine.restoreSnapshot;
  machine.restoreSnapshot = (snapshot, scope) => {
    if (isPromiseSnapshot(snapshot))
      return machine.getInitialSnapshot(scope, { ...snapshot.input, resumed: true });
    const persisted = snapshot as PersistedCall;
    const { request } = persisted.context;
    const restoring: PersistedCall = {
      ...persisted,
      children: withSends(persisted.children, (send) => ({ request, ...send })),
    };
    return restoreMachine(restoring, scope);
  };
  return machine;
}

/** A step call's persisted snapshot, as far as its send in flight (its `request` child) goes. */
type PersistedCall = Snapshot<unknown> & {
  context: StepCallContext;
  children: Record<string, { src?: unknown; snapshot?: { input?: Partial<RequestInput> } }>;
};

/** The persisted children with the input of the send in flight, if any, made by `change`. */
function withSends(
  children: PersistedCall['children'] | undefined,
  change: (input: Partial<RequestInput>) => Partial<RequestInput>,
): PersistedCall['children'] {
  const changed: PersistedCall['children'] = {};
  for (const [id, child] of Object.entries(children ?? {})) {
    const input = child.src === 'request' ? child.snapshot?.input : undefined;
    changed[id] =
      input === undefined ? child : { ...child, snapshot: { ...child.snapshot, input: change(input) } };
  }
  return changed;
}

/** The step call's logic, as {@link createStepCallLogic} builds it. */
export type StepCallLogic = ReturnType<typeof createStepCallLogic>;

/**
 * What a workflow invokes for a step an agent answers: the step call, or a stand-in that answers the step itself (a
 * replay runs the agent in this process, a test answers from a script), ending with the reply or failing, as the
 * step call does. (XState's logic types are invariant, so the two are named side by side.)
 */
export type StepCallActorLogic = StepCallLogic | PromiseActorLogic<StepRunOutput, StepRunInput>;
