import type { StepActivity } from '@troupe/protocol';
import {
  AgentStepReply,
  type AgentStepRequest,
  applyWorkspaceChanges,
  isRetryable,
  StepHeartbeat,
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
import { assign, fromCallback, setup } from 'xstate';

/** How long past a step's timeout the workflow waits for the agent's own account of it before giving up. */
export const REPLY_GRACE_MS = 2_000;
/** Heartbeats in a row a step may miss before it goes to another worker. */
export const MISSED_HEARTBEATS = 3;

/** What a step call needs besides its step: the same for every step of a pipeline. */
export interface StepCallServices {
  bus: Bus;
  clock: Clock;
  logger?: Logger | undefined;
  /** How long to keep trying while no worker serves the agent (workers may still be starting). */
  waitForWorkersMs: number;
  /** How often the agent host must report on the step. */
  heartbeatMs: number;
  /** Told when what the step is doing changes: the agent works, waits for a person or a model, or for a worker. */
  onActivity?: ((taskId: string, activity: StepActivity) => void) | undefined;
}

export interface StepCallInput {
  services: StepCallServices;
  request: AgentStepRequest;
  /** The subject of the step's agent. */
  subject: string;
  /** How long the step may take in all, from `started`. */
  timeoutMs: number;
  started: number;
  /** The task's first delivery: the first send of the step is `fresh` (no run of it can have started before). */
  firstDelivery: boolean;
}

/** How the call ended: the agent's reply, or why there was none. */
export type StepCallOutput = { ok: true; reply: AgentStepReply } | { ok: false; error: Error };

/**
 * What the step call hears: from its request (each heartbeat, then the reply or the request's failure), from the
 * connection (a reconnect, after which a reply in flight may be lost), and from the workflow (stop waiting).
 */
export type StepCallEvent =
  | { type: 'heartbeat'; heartbeat: StepHeartbeat }
  | { type: 'replied'; reply: AgentStepReply }
  | { type: 'failed'; error: unknown }
  | { type: 'reconnect' }
  | { type: 'abort' };

interface StepCallContext extends StepCallInput {
  /** Requests sent so far. */
  attempts: number;
  /** Since when no worker answered. */
  noWorkerSince?: number | undefined;
  /** A worker died or lost its journal under this step: wait for another as long as the step may take. */
  takenOver: boolean;
  /** What the step waits on a person for, as its last heartbeat said. */
  waitingFor?: StepHeartbeat['waitingFor'];
  /** What the step was last reported doing, so only a change is passed on. */
  lastActivity: string;
  /** The failure that ended the call. */
  error?: Error;
  reply?: AgentStepReply;
  /**
   * The workspace manifest the workflow sent the step with, once a run that did not end the step (its worker stopped,
   * its journal was out of reach) handed on files: the step is sent again with them, and its reply's changes are
   * counted from here.
   */
  workspaceBase?: WorkspaceManifest | undefined;
}

type Ctx = { context: StepCallContext };

const timeLeft = (context: StepCallContext): number =>
  context.timeoutMs - (context.services.clock.now() - context.started);

/** The wait before sending again: 250 ms, doubling with each request, at most 2 s. */
const backoff = (context: StepCallContext): number => Math.min(250 * 2 ** (context.attempts - 1), 2_000);

/** The step's timeout as its error: `approval_timeout` when the last heartbeat said a person was being asked. */
function timedOut(context: StepCallContext): Error {
  const { code, message } = stepTimeoutError(context.request.agent, context.timeoutMs, context.waitingFor);
  return new TransportError(code, message);
}

/** Reports what the step does now, when it changed. */
function report(context: StepCallContext, kind: StepActivity['kind']): string {
  const key = `${kind}:${context.waitingFor?.id ?? ''}`;
  const { onActivity, clock } = context.services;
  if (!onActivity || key === context.lastActivity) return context.lastActivity;
  const { request, waitingFor } = context;
  const where = { step: request.step, agent: request.agent, since: new Date(clock.now()).toISOString() };
  onActivity(
    request.taskId,
    kind === 'person' && waitingFor
      ? { kind, ...where, request: waitingFor }
      : { kind: kind === 'person' ? 'agent' : kind, ...where },
  );
  return key;
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

function explain(context: StepCallContext, error: unknown): Error {
  if (TransportError.is(error, 'no_responders')) {
    const waited =
      context.noWorkerSince === undefined ? 0 : context.services.clock.now() - context.noWorkerSince;
    return new TransportError(
      'no_responders',
      `no worker serves agent ${context.request.agent} on ${context.subject} (waited ${Math.round(waited / 1000)} s); ` +
        'start `troupe worker` (or `troupe up` without --no-agents) with this pipeline on this NATS server',
      { cause: error },
    );
  }
  return error instanceof Error ? error : new Error(String(error));
}

/**
 * One step sent to its agent over NATS, as an actor: it sends the request and hears the host's heartbeats and then
 * its reply. While nobody serves the agent it sends again with backoff (`waitingForWorker`), and gives up after
 * `waitForWorkersMs` with a message that says which subject has no worker. When the host goes silent for
 * {@link MISSED_HEARTBEATS} heartbeats (its process died), or loses its journal, or stops mid-step, the step is sent
 * again with the same id and another worker takes it over from the step's journal; after that, it waits for a
 * worker as long as the step may take. A reconnect sends it again at once (a reply in flight may be lost; the host
 * joins a resend to the run it has). Its timers run on the services' clock.
 */
export const stepCallMachine = setup({
  types: {
    context: {} as StepCallContext,
    input: {} as StepCallInput,
    events: {} as StepCallEvent,
    output: {} as StepCallOutput,
  },
  actors: {
    /** The request: its heartbeats, reply or failure come back as events; leaving the state cancels it. */
    request: fromCallback<StepCallEvent, StepCallContext>(({ input: context, sendBack }) => {
      const { services, request } = context;
      const abort = new AbortController();
      let settled = false;
      const left = timeLeft(context);
      // While no worker serves the agent the step is sent again every 2 s: one line says so, not each send.
      const logLevel: MessageLogLevel | undefined = context.noWorkerSince === undefined ? undefined : 'debug';
      requestWithHeartbeats(
        services.bus,
        context.subject,
        {
          ...request,
          timeoutMs: left,
          heartbeatMs: services.heartbeatMs,
          ...(context.firstDelivery && context.attempts === 1 ? { fresh: true as const } : {}),
        },
        AgentStepReply,
        StepHeartbeat,
        {
          // The agent stops itself at `left` and says why (what it waited on); its reply gets a moment to come.
          timeoutMs: left + REPLY_GRACE_MS,
          idleMs: services.heartbeatMs * MISSED_HEARTBEATS,
          signal: abort.signal,
          meta: {
            taskId: request.taskId,
            from: request.from ?? 'workflow',
            to: request.agent,
            kind: 'agent.step',
          },
          clock: services.clock,
          onHeartbeat: (heartbeat) => sendBack({ type: 'heartbeat', heartbeat: heartbeat as StepHeartbeat }),
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
      // Leaving the state while the request still waits stops it (a settled one needs nothing, and an abort costs).
      return () => {
        if (!settled) abort.abort();
      };
    }),
  },
  delays: {
    backoff: ({ context }) => backoff(context),
  },
  guards: {
    outOfTime: ({ context }) => timeLeft(context) <= 0,
    journalUnavailable: (_, reply: AgentStepReply) => !reply.ok && reply.error.code === 'journal_unavailable',
    final: (_, reply: AgentStepReply) => reply.ok || !isRetryable(reply.error.code),
    failedWith: (_, p: { error: unknown; code: TransportErrorCode }) => TransportError.is(p.error, p.code),
    gaveUpOnWorkers: ({ context }) =>
      !context.takenOver &&
      context.noWorkerSince !== undefined &&
      context.services.clock.now() - context.noWorkerSince >= context.services.waitForWorkersMs,
  },
  actions: {
    heard: assign(({ context }, heartbeat: StepHeartbeat) => {
      const next = { ...context, waitingFor: heartbeat.waitingFor };
      const kind = heartbeat.waitingFor ? 'person' : heartbeat.waitingOnModel ? 'model' : 'agent';
      return { waitingFor: heartbeat.waitingFor, lastActivity: report(next, kind) };
    }),
    takenOver: assign(({ context }, why: string) => {
      context.services.logger?.warn({ stepId: context.request.stepId, agent: context.request.agent }, why);
      return { takenOver: true, noWorkerSince: undefined };
    }),
    noWorker: assign(({ context }) => {
      if (context.noWorkerSince === undefined) {
        context.services.logger?.warn(
          { stepId: context.request.stepId, agent: context.request.agent },
          `no worker serves agent ${context.request.agent} yet; step ${context.request.stepId} waits for one (start one with troupe worker <pipeline.yaml>)`,
        );
      }
      const noWorkerSince = context.noWorkerSince ?? context.services.clock.now();
      return { noWorkerSince, lastActivity: report({ ...context, noWorkerSince }, 'worker') };
    }),
    fail: assign((_, error: Error) => ({ error })),
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
  context: ({ input }) => ({ ...input, attempts: 0, takenOver: false, lastActivity: '' }),
  initial: 'sending',
  on: {
    abort: {
      target: '.failed',
      actions: {
        type: 'fail',
        params: ({ context }) => new TransportError('aborted', `step ${context.request.stepId} was aborted`),
      },
    },
  },
  states: {
    /** About to send (again): within the step's time, or it has run out. */
    sending: {
      always: [
        {
          guard: 'outOfTime',
          target: 'failed',
          actions: { type: 'fail', params: ({ context }: Ctx) => timedOut(context) },
        },
        { target: 'sent' },
      ],
    },
    sent: {
      entry: assign({ attempts: ({ context }) => context.attempts + 1 }),
      invoke: { src: 'request', input: ({ context }) => context },
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
            target: 'replied',
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
            guard: { type: 'failedWith', params: ({ event }) => ({ error: event.error, code: 'timeout' }) },
            target: 'failed',
            actions: { type: 'fail', params: ({ context }) => timedOut(context) },
          },
          {
            guard: { type: 'failedWith', params: ({ event }) => ({ error: event.error, code: 'stalled' }) },
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
            target: 'failed',
            actions: { type: 'fail', params: ({ context, event }) => explain(context, event.error) },
          },
        ],
      },
    },
    /** Nobody serves the agent (yet), or its worker stopped: sent again after a backoff, until the wait is over. */
    waitingForWorker: {
      always: {
        guard: 'gaveUpOnWorkers',
        target: 'failed',
        actions: {
          type: 'fail',
          params: ({ context }: Ctx) =>
            explain(context, new TransportError('no_responders', `no one is serving ${context.subject}`)),
        },
      },
      after: { backoff: 'sending' },
    },
    backingOff: {
      after: { backoff: 'sending' },
    },
    replied: { type: 'final' },
    failed: { type: 'final' },
  },
  output: ({ context }) =>
    context.reply
      ? { ok: true, reply: context.reply }
      : { ok: false, error: context.error ?? new Error('step call ended') },
});
