import type { StepActivity } from '@troupe/protocol';
import { subjects } from '@troupe/protocol';
import type { Bus, Clock, Logger } from '@troupe/runtime';
import { createActor, toPromise } from 'xstate';
import { stepCallMachine } from './stepCall.ts';
import type { StepRunInput, StepRunOutput } from './workflowTypes.ts';

/** How much longer than the task's deadline the workflow waits for the agent's own account of running out. */
const DEADLINE_GRACE_MS = 5_000;

/** How often a host reports on a step by default; three missed reports and the step goes to another worker. */
export const DEFAULT_STEP_HEARTBEAT_MS = 5_000;

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
 * Runs each step the workflow invokes as a step call actor ({@link stepCallMachine}) on the runner's clock: the
 * connection's reconnects and the workflow's abort reach it as events, and its final state is the step's reply or
 * the reason there is none.
 */
export function createStepRunner(options: StepRunnerOptions) {
  const services = {
    bus: options.bus,
    clock: options.clock,
    logger: options.logger,
    waitForWorkersMs: options.noResponderWaitMs ?? 30_000,
    heartbeatMs: options.heartbeatMs ?? DEFAULT_STEP_HEARTBEAT_MS,
    onActivity: options.onActivity,
  };
  return async (input: StepRunInput, signal: AbortSignal): Promise<StepRunOutput> => {
    const { request } = input;
    const { clock, bus } = options;
    // Past the task's deadline the agent stops itself and says so; wait a little longer for that reply.
    const deadline = request.budget?.deadline;
    const timeoutMs =
      deadline === undefined
        ? input.timeoutMs
        : Math.min(input.timeoutMs, Math.max(1, deadline - clock.now()) + DEADLINE_GRACE_MS);
    const started = clock.now();
    const call = createActor(stepCallMachine, {
      clock,
      input: {
        services,
        request,
        subject: subjects.agent(request.pipeline, request.agent),
        timeoutMs,
        started,
        firstDelivery: input.firstDelivery === true,
      },
    });
    const stopWatching = bus.onStatus((status) => {
      if (status.type === 'reconnect') call.send({ type: 'reconnect' });
    });
    const onAbort = () => call.send({ type: 'abort' });
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      call.start();
      if (signal.aborted) onAbort();
      const outcome = await toPromise(call);
      if (!outcome.ok) throw outcome.error;
      return { ...outcome.reply, durationMs: Math.max(0, clock.now() - started) };
    } finally {
      stopWatching();
      signal.removeEventListener('abort', onAbort);
    }
  };
}
