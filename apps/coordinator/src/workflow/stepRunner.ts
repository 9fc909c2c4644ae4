import { AgentStepReply, subjects } from '@troupe/protocol';
import { type Clock, type NatsBus, TransportError } from '@troupe/runtime';
import type { StepRunInput, StepRunOutput } from './workflowTypes.ts';

const DEADLINE_GRACE_MS = 5_000;

export interface StepRunnerOptions {
  bus: NatsBus;
  clock: Clock;
  /** How long to keep trying while no worker serves the agent (workers may still be starting). */
  noResponderWaitMs?: number;
}

/**
 * Sends a step to its agent over NATS and waits for the reply. While nobody serves the agent it retries with
 * backoff, then fails with a message that says which subject has no worker.
 */
export function createStepRunner(options: StepRunnerOptions) {
  const waitForWorkersMs = options.noResponderWaitMs ?? 30_000;
  return async (input: StepRunInput, signal: AbortSignal): Promise<StepRunOutput> => {
    const { request } = input;
    // Past the task's deadline the agent stops itself and says so; wait a little longer for that reply.
    const deadline = request.budget?.deadline;
    const timeoutMs =
      deadline === undefined
        ? input.timeoutMs
        : Math.min(input.timeoutMs, Math.max(1, deadline - options.clock.now()) + DEADLINE_GRACE_MS);
    const subject = subjects.agent(request.pipeline, request.agent);
    const started = options.clock.now();
    for (let attempt = 0; ; attempt++) {
      // A reply in flight when the connection drops is lost; after a reconnect the step is sent again (the
      // agent host joins a resend to the run it already has, and the journal keeps side effects single).
      const resend = new AbortController();
      const stopWatching = options.bus.onStatus((status) => {
        if (status.type === 'reconnect') resend.abort();
      });
      try {
        // The agent is told the step's deadline too, so it stops when the workflow stops waiting.
        const reply = await options.bus.request(subject, { ...request, timeoutMs }, AgentStepReply, {
          timeoutMs,
          signal: AbortSignal.any([signal, resend.signal]),
          meta: {
            taskId: request.taskId,
            from: request.from ?? 'workflow',
            to: request.agent,
            kind: 'agent.step',
          },
        });
        if (reply.ok || reply.error.code !== 'worker_stopped') {
          return { ...reply, durationMs: Math.max(0, options.clock.now() - started) };
        }
        throw new TransportError('no_responders', reply.error.message);
      } catch (error) {
        if (resend.signal.aborted && !signal.aborted) continue;
        // Nobody serves the agent yet, or its worker stopped mid-step: another worker may take the step.
        const noWorker = error instanceof TransportError && error.code === 'no_responders';
        const waited = options.clock.now() - started;
        if (!noWorker || waited >= waitForWorkersMs) throw explain(error, subject, request.agent, waited);
        await sleep(Math.min(250 * 2 ** attempt, 2_000), signal);
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
        'start `troupe up` with this pipeline (and its agents) on this NATS server',
      { cause: error },
    );
  }
  if (error instanceof TransportError && error.code === 'timeout') {
    return new TransportError(
      'timeout',
      `agent ${agent} did not reply on ${subject} within the step timeout`,
      {
        cause: error,
      },
    );
  }
  return error instanceof Error ? error : new Error(String(error));
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(new Error('step aborted'));
    const onAbort = () => {
      clearTimeout(timer);
      reject(new Error('step aborted'));
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
