import type { StepActivity } from '@troupe/protocol';
import { TransportError } from '@troupe/runtime';
import { assign, createActor, setup, toPromise } from 'xstate';
import { RUN_CONTEXT_ID, type RunContextEvent, type RunFacts, runContextLogic } from '../task/runContext.ts';
import { createStepCallLogic, type StepCallServices } from './stepCall.ts';
import type { StepRunInput, StepRunOutput } from './workflowTypes.ts';

/** How often a host reports on a step by default; three missed reports and the step goes to another worker. */
export const DEFAULT_STEP_HEARTBEAT_MS = 5_000;

export interface StepRunnerOptions
  extends Pick<StepCallServices, 'bus' | 'clock' | 'logger' | 'local' | 'sends'> {
  /** How long to keep trying while no worker serves the agent (workers may still be starting). */
  noResponderWaitMs?: number;
  /** How often the agent host must report on a step (see {@link DEFAULT_STEP_HEARTBEAT_MS}). */
  heartbeatMs?: number;
  /** Told when what the step is doing changes: the agent works, waits for a person, or waits for a worker. */
  onActivity?: (taskId: string, activity: StepActivity) => void;
}

/** The step call's services from a runner's options, with their defaults. */
export function stepCallServices(options: StepRunnerOptions): StepCallServices {
  return {
    bus: options.bus,
    clock: options.clock,
    logger: options.logger,
    waitForWorkersMs: options.noResponderWaitMs ?? 30_000,
    heartbeatMs: options.heartbeatMs ?? DEFAULT_STEP_HEARTBEAT_MS,
    ...(options.local ? { local: options.local } : {}),
    ...(options.sends ? { sends: options.sends } : {}),
  };
}

interface LoneStep {
  facts: RunFacts;
  step: StepRunInput;
  /** How the call ended: its reply, or the error it failed with. */
  outcome?: { reply: StepRunOutput } | { error: unknown };
}

/**
 * Runs one step call outside a workflow, as a promise: for a caller that asks one agent one step (a tool, a test).
 * The call runs beside a run context made from the step's input (its first delivery, its trace and version), as it
 * would in a task's tree, and its activity goes to `onActivity`. Aborting the signal stops the call, and with it the
 * request in flight; the promise then fails with `aborted`.
 */
export function createStepRunner(options: StepRunnerOptions) {
  const lone = setup({
    types: {
      context: {} as LoneStep,
      input: {} as Omit<LoneStep, 'outcome'>,
      events: {} as RunContextEvent,
      output: {} as LoneStep['outcome'],
    },
    actors: { runContext: runContextLogic, stepCall: createStepCallLogic(stepCallServices(options)) },
  }).createMachine({
    context: ({ input }) => input,
    invoke: { src: 'runContext', systemId: RUN_CONTEXT_ID, input: ({ context }) => context.facts },
    on: {
      activity: {
        actions: ({ context, event }) => options.onActivity?.(context.facts.taskId, event.activity),
      },
    },
    initial: 'calling',
    states: {
      calling: {
        invoke: {
          src: 'stepCall',
          input: ({ context }) => context.step,
          onDone: { target: 'done', actions: assign({ outcome: ({ event }) => ({ reply: event.output }) }) },
          onError: { target: 'done', actions: assign({ outcome: ({ event }) => ({ error: event.error }) }) },
        },
      },
      done: { type: 'final' },
    },
    output: ({ context }) => context.outcome,
  });
  return async (input: StepRunInput, signal: AbortSignal): Promise<StepRunOutput> => {
    const { request } = input;
    const facts: RunFacts = {
      taskId: request.taskId,
      firstDelivery: input.firstDelivery === true,
      traceparent: request.traceparent ?? '',
      ...(request.version === undefined ? {} : { version: request.version }),
    };
    const call = createActor(lone, { clock: options.clock, input: { facts, step: input } });
    const stop = () => call.stop();
    signal.addEventListener('abort', stop, { once: true });
    try {
      call.start();
      if (signal.aborted) stop();
      const outcome = await toPromise(call);
      if (!outcome) throw new TransportError('aborted', `step ${request.stepId} was aborted`);
      if ('error' in outcome) throw outcome.error;
      return outcome.reply;
    } finally {
      signal.removeEventListener('abort', stop);
    }
  };
}
