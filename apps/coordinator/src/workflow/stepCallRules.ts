import type { StepActivity } from '@troupe/protocol';
import {
  type AgentStepReply,
  applyWorkspaceChanges,
  isRetryable,
  type StepHeartbeat,
  subjects,
  workspaceDiff,
} from '@troupe/protocol';
import { type Clock, TransportError, type TransportErrorCode } from '@troupe/runtime';
import type { ActorSystem } from 'xstate';
import { reportActivity, steeringOf } from '../task/runContext.ts';
import type { TaskSteering } from '../task/taskSteering.ts';
import type { StepCallContext, StepCallInput, StepCallServices } from './stepCall.ts';
import { heldDeadline } from './stepCallDeadline.ts';
import { errorOf, type StepCallFailure } from './stepCallFailure.ts';

/** How much longer than the task's deadline a step waits for the agent's own account of running out. */
export const DEADLINE_GRACE_MS = 5_000;

// biome-ignore lint/suspicious/noExplicitAny: xstate types a system by its registered actors, which a provided actor cannot know.
type AnySystem = ActorSystem<any>;
/** What a guard of the step call reads: its context. */
interface GuardArgs {
  context: StepCallContext;
}
/** What an action of the step call reads: its context, and the task's system for activity reports. */
interface CallArgs extends GuardArgs {
  system: AnySystem;
}

/**
 * What is left of the step's time on `clock`, counted from its first send (moved on by the time it was held). When
 * held time counts against the task's deadline, the time to that deadline (and its grace) bounds it still.
 */
export const timeLeft = (
  clock: Clock,
  context: Pick<StepCallContext, 'timeoutMs' | 'started' | 'request' | 'pausedTimeCounts'>,
): number => {
  const left = context.timeoutMs - (clock.now() - context.started);
  const deadline = heldDeadline(context);
  return deadline === undefined ? left : Math.min(left, deadline + DEADLINE_GRACE_MS - clock.now());
};

/** How long the task was held in all, up to `now`: the pauses that ended, and the one in force so far. */
export const heldSoFar = (steering: Pick<TaskSteering, 'pausedMs' | 'paused'>, now: number): number =>
  steering.pausedMs + (steering.paused ? Math.max(0, now - steering.paused.since) : 0);

/** The wait before sending again: 250 ms, doubling with each request, at most 2 s. */
export const backoff = (context: StepCallContext): number =>
  Math.min(250 * 2 ** (context.attempts - 1), 2_000);

/** A new call's context: its timeout cut to the task's deadline (past it the agent stops itself and says so). */
export function startingContext(
  clock: Clock,
  input: StepCallInput,
  steering?: Pick<TaskSteering, 'pausedMs' | 'paused'>,
): StepCallContext {
  const { request } = input;
  const started = clock.now();
  const pausedMs = steering?.pausedMs ?? 0;
  // The task's deadline comes later by the time it was held (see `stepCallSend.ts`, which sends it so), unless the
  // pipeline counts held time against it.
  const moved = input.pausedTimeCounts === true ? 0 : pausedMs;
  const deadline = request.budget?.deadline === undefined ? undefined : request.budget.deadline + moved;
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
    ...(input.pausedTimeCounts === true ? { pausedTimeCounts: true } : {}),
    ...(steering ? { heldBase: heldSoFar(steering, started) } : {}),
    takenOver: false,
    lastActivity: '',
  };
}

/** What the step call decides on: the conditions of its transitions. */
export function stepCallGuards({ clock, waitForWorkersMs }: StepCallServices) {
  return {
    pausedReply: (_: unknown, reply: AgentStepReply) => !reply.ok && reply.error.code === 'paused',
    outOfTime: ({ context }: GuardArgs) => timeLeft(clock, context) <= 0,
    journalUnavailable: (_: unknown, reply: AgentStepReply) =>
      !reply.ok && reply.error.code === 'journal_unavailable',
    final: (_: unknown, reply: AgentStepReply) => reply.ok || !isRetryable(reply.error.code),
    failedWith: (_: unknown, p: { error: unknown; code: TransportErrorCode }) =>
      TransportError.is(p.error, p.code),
    gaveUpOnWorkers: ({ context }: GuardArgs) =>
      !context.takenOver &&
      context.noWorkerSince !== undefined &&
      clock.now() - context.noWorkerSince >= waitForWorkersMs,
  };
}

/**
 * What the step call does on its transitions, as changes to its context (the chart wraps each in `assign`), and
 * `throwFailure`, its way to fail (see the chart's `failed`).
 */
export function stepCallActions({ clock, logger }: StepCallServices) {
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
  return {
    /** The call fails with its failure as the error the workflow reads its reason from. */
    throwFailure: ({ context }: CallArgs) => {
      throw errorOf(context.failure);
    },
    countAttempt: ({ context }: CallArgs): Partial<StepCallContext> => ({ attempts: context.attempts + 1 }),
    unsent: ({ context }: CallArgs): Partial<StepCallContext> => ({
      attempts: Math.max(0, context.attempts - 1),
    }),
    heard: ({ context, system }: CallArgs, heartbeat: StepHeartbeat): Partial<StepCallContext> => {
      const next = { ...context, waitingFor: heartbeat.waitingFor };
      const kind = heartbeat.waitingFor ? 'person' : heartbeat.waitingOnModel ? 'model' : 'agent';
      return { waitingFor: heartbeat.waitingFor, lastActivity: report(system, next, kind) };
    },
    takenOver: ({ context }: CallArgs, why: string): Partial<StepCallContext> => {
      logger?.warn({ stepId: context.request.stepId, agent: context.request.agent }, why);
      return { takenOver: true, noWorkerSince: undefined, resentBecause: why };
    },
    noWorker: ({ context, system }: CallArgs): Partial<StepCallContext> => {
      if (context.noWorkerSince === undefined) {
        logger?.warn(
          { stepId: context.request.stepId, agent: context.request.agent },
          `no worker serves agent ${context.request.agent} yet; step ${context.request.stepId} waits for one (start one with troupe worker <pipeline.yaml>)`,
        );
      }
      const noWorkerSince = context.noWorkerSince ?? clock.now();
      return { noWorkerSince, lastActivity: report(system, { ...context, noWorkerSince }, 'worker') };
    },
    fail: (_: CallArgs, failure: StepCallFailure): Partial<StepCallContext> => ({ failure }),
    /**
     * Held since the task was paused (or since the step was first sent, if later): the time its host took to finish
     * its call, and a restart while it was held, count as held too, as they do for the task's deadline. Restored
     * held, it keeps the time it was held from.
     */
    holdFrom: ({ context, system }: CallArgs): Partial<StepCallContext> => {
      const now = clock.now();
      const paused = steeringOf(system)?.paused?.since ?? now;
      return { heldSince: context.heldSince ?? Math.max(context.started, Math.min(now, paused)) };
    },
    /**
     * Let go: the time held is added to the step's start (and to its wait for a worker), so neither counts it. It is
     * the task's held time since the start was last moved on (`heldBase`), so a hold the call did not hear (it was
     * down, restored from a checkpoint of before the pause) counts too.
     */
    unhold: ({ context, system }: CallArgs): Partial<StepCallContext> => {
      const now = clock.now();
      const steering = steeringOf(system);
      const total = steering && context.heldBase !== undefined ? heldSoFar(steering, now) : undefined;
      const held =
        total === undefined || context.heldBase === undefined
          ? Math.max(0, now - (context.heldSince ?? now))
          : Math.max(0, total - context.heldBase);
      return {
        heldSince: undefined,
        ...(total === undefined ? {} : { heldBase: total }),
        started: context.started + held,
        ...(context.noWorkerSince === undefined ? {} : { noWorkerSince: context.noWorkerSince + held }),
      };
    },
    /** A run that did not end the step handed on files: the next run starts from them (and sees what it wrote). */
    carryWorkspace: ({ context }: CallArgs, reply: AgentStepReply): Partial<StepCallContext> => {
      if (!reply.workspace) return {};
      const workspace = applyWorkspaceChanges(context.request.workspace, reply.workspace);
      return {
        request: { ...context.request, workspace },
        workspaceBase: context.workspaceBase ?? context.request.workspace ?? {},
      };
    },
    /** What a `paused` reply says the step spent so far, for a step the deadline ends while held. */
    keepSpent: (_: CallArgs, reply: AgentStepReply): Partial<StepCallContext> => ({
      spent: { usage: reply.usage, turns: reply.turns },
    }),
    /** The reply, with the workspace changes of every run of the step, counted from the manifest the workflow sent. */
    keepReply: ({ context }: CallArgs, reply: AgentStepReply): Partial<StepCallContext> => {
      const base = context.workspaceBase;
      if (base === undefined) return { reply };
      const now = reply.workspace
        ? applyWorkspaceChanges(context.request.workspace, reply.workspace)
        : (context.request.workspace ?? {});
      return { reply: { ...reply, workspace: workspaceDiff(base, now) } };
    },
  };
}
