import { AgentStepReply, isRetryable, StepHeartbeat, subjects } from '@troupe/protocol';
import {
  type Bus,
  type Clock,
  type Logger,
  requestWithHeartbeats,
  sleep,
  stepTimeoutError,
  TransportError,
} from '@troupe/runtime';
import type { StepActivity } from './workflowRecord.ts';
import type { StepRunInput, StepRunOutput } from './workflowTypes.ts';

const DEADLINE_GRACE_MS = 5_000;
/** How long past a step's timeout the workflow waits for the agent's own account of it before giving up. */
const REPLY_GRACE_MS = 2_000;

/** How often a host reports on a step by default; three missed reports and the step goes to another worker. */
export const DEFAULT_STEP_HEARTBEAT_MS = 5_000;
const MISSED_HEARTBEATS = 3;

export interface StepRunnerOptions {
  bus: Bus;
  clock: Clock;
  logger?: Logger;
  /** How long to keep trying while no worker serves the agent (workers may still be starting). */
  noResponderWaitMs?: number;
  /** How often the agent host must report on a step (see {@link DEFAULT_STEP_HEARTBEAT_MS}). */
  heartbeatMs?: number;
  /** Told when what the step is doing changes: the agent works, waits for a person, or waits for a worker. */
  onActivity?: (taskId: string, activity: StepActivity) => void;
}

/**
 * Sends a step to its agent over NATS and waits for the reply. While nobody serves the agent it retries with
 * backoff, then fails with a message that says which subject has no worker. The host reports on the step every
 * `heartbeatMs`; when it goes silent for three reports (its process died) the step is sent again, with the same
 * id, and another worker takes it over from the step's journal.
 */
export function createStepRunner(options: StepRunnerOptions) {
  const waitForWorkersMs = options.noResponderWaitMs ?? 30_000;
  const heartbeatMs = options.heartbeatMs ?? DEFAULT_STEP_HEARTBEAT_MS;
  return async (input: StepRunInput, signal: AbortSignal): Promise<StepRunOutput> => {
    const { request } = input;
    const { clock } = options;
    // Past the task's deadline the agent stops itself and says so; wait a little longer for that reply.
    const deadline = request.budget?.deadline;
    const timeoutMs =
      deadline === undefined
        ? input.timeoutMs
        : Math.min(input.timeoutMs, Math.max(1, deadline - clock.now()) + DEADLINE_GRACE_MS);
    const subject = subjects.agent(request.pipeline, request.agent);
    const started = clock.now();
    const meta = {
      taskId: request.taskId,
      from: request.from ?? 'workflow',
      to: request.agent,
      kind: 'agent.step',
    };
    /** Since when no worker answered, and whether a worker died under this step before that. */
    let noWorkerSince: number | undefined;
    let takenOver = false;
    /** What the step waited on a person for, as its last heartbeat said. */
    let waitingFor: StepHeartbeat['waitingFor'];
    /** What the step was last reported doing, so only a change is passed on. */
    let lastActivity = '';
    const report = (kind: StepActivity['kind']) => {
      const key = `${kind}:${waitingFor?.id ?? ''}`;
      if (!options.onActivity || key === lastActivity) return;
      lastActivity = key;
      const since = new Date(clock.now()).toISOString();
      const where = { step: request.step, agent: request.agent, since };
      options.onActivity(
        request.taskId,
        kind === 'person' && waitingFor
          ? { kind, ...where, request: waitingFor }
          : { kind: kind === 'person' ? 'agent' : kind, ...where },
      );
    };
    const onHeartbeat = (heartbeat: unknown) => {
      const { waitingFor: person, waitingOnModel } = heartbeat as StepHeartbeat;
      waitingFor = person;
      report(waitingFor ? 'person' : waitingOnModel ? 'model' : 'agent');
    };
    const timedOut = () => {
      const { code, message } = stepTimeoutError(request.agent, timeoutMs, waitingFor);
      return new TransportError(code, message);
    };
    for (let attempt = 0; ; attempt++) {
      const left = timeoutMs - (clock.now() - started);
      if (left <= 0) throw timedOut();
      // A reply in flight when the connection drops is lost; after a reconnect the step is sent again (the
      // agent host joins a resend to the run it already has, and the journal keeps side effects single).
      const resend = new AbortController();
      const stopWatching = options.bus.onStatus((status) => {
        if (status.type === 'reconnect') resend.abort();
      });
      try {
        // The agent is told the step's deadline too, so it stops when the workflow stops waiting.
        const reply = await requestWithHeartbeats(
          options.bus,
          subject,
          { ...request, timeoutMs: left, heartbeatMs },
          AgentStepReply,
          StepHeartbeat,
          {
            // The agent stops itself at `left` and says why (what it waited on); its reply gets a moment to come.
            timeoutMs: left + REPLY_GRACE_MS,
            idleMs: heartbeatMs * MISSED_HEARTBEATS,
            signal: AbortSignal.any([signal, resend.signal]),
            meta,
            clock,
            onHeartbeat,
            // While no worker serves the agent the step is sent again every 2 s: one line says so, not each send.
            ...(noWorkerSince === undefined ? {} : { logLevel: 'debug' as const }),
          },
        );
        if (!reply.ok && reply.error.code === 'journal_unavailable') {
          // The host could not reach the step journal (NATS trouble): the step goes again once it can.
          options.logger?.warn(
            { stepId: request.stepId, agent: request.agent },
            `step ${request.stepId} stopped: ${reply.error.message}; sending it again`,
          );
          takenOver = true;
          await sleep(clock, Math.min(250 * 2 ** attempt, 2_000), signal, 'step aborted');
          continue;
        }
        if (reply.ok || !isRetryable(reply.error.code)) {
          return { ...reply, durationMs: Math.max(0, clock.now() - started) };
        }
        throw new TransportError('no_responders', reply.error.message);
      } catch (error) {
        if (resend.signal.aborted && !signal.aborted) continue;
        if (TransportError.is(error, 'timeout')) throw timedOut();
        if (error instanceof TransportError && error.code === 'stalled') {
          options.logger?.warn(
            { stepId: request.stepId, agent: request.agent },
            `the worker running step ${request.stepId} went silent; sending the step to another worker`,
          );
          takenOver = true;
          noWorkerSince = undefined;
          continue;
        }
        // Nobody serves the agent yet, or its worker stopped mid-step: another worker may take the step.
        // After a worker died under the step, wait for another as long as the step may still take.
        const noWorker = error instanceof TransportError && error.code === 'no_responders';
        if (noWorker && noWorkerSince === undefined) {
          options.logger?.warn(
            { stepId: request.stepId, agent: request.agent },
            `no worker serves agent ${request.agent} yet; step ${request.stepId} waits for one (start one with troupe worker <pipeline.yaml>)`,
          );
        }
        noWorkerSince ??= clock.now();
        if (noWorker) report('worker');
        const waited = clock.now() - noWorkerSince;
        if (!noWorker || (!takenOver && waited >= waitForWorkersMs))
          throw explain(error, subject, request.agent, waited);
        await sleep(clock, Math.min(250 * 2 ** attempt, 2_000), signal, 'step aborted');
      } finally {
        stopWatching();
      }
    }
  };
}

function explain(error: unknown, subject: string, agent: string, waitedMs: number): Error {
  if (error instanceof TransportError && error.code === 'no_responders') {
    return new TransportError(
      'no_responders',
      `no worker serves agent ${agent} on ${subject} (waited ${Math.round(waitedMs / 1000)} s); ` +
        'start `troupe worker` (or `troupe up` without --no-agents) with this pipeline on this NATS server',
      { cause: error },
    );
  }
  return error instanceof Error ? error : new Error(String(error));
}
