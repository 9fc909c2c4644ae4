import type { EventObject } from 'xstate';
import type { AgentStepConfig, StepConfig } from '../../config/pipelineSchema.ts';
import type { WorkflowContext, WorkflowFailure } from '../workflowTypes.ts';
import type { ListScope } from './flowList.ts';
import { stepId } from './stepRequest.ts';
import type { Args, ContextParam, StepAction, WorkflowState } from './workflowSetup.ts';
import { assignFor } from './workflowSetup.ts';

/**
 * A transition out of a failed step, after its own records: a retry, or what `onError` says. `when`, for a retry, is
 * the guard each step's kind completes with its own test of whether the step failed and may be retried.
 */
export interface Recovering<E extends EventObject> {
  target: string;
  actions: StepAction<E>[];
  when?: (args: Args<E>, retriable: boolean) => boolean;
}

/**
 * The transitions a failure of a step takes on an event of type `E`, given the failure and the actions before: its
 * retry, when it has one, then what `onError` says (always there).
 */
export type Recovery = <E extends EventObject>(
  failure: ContextParam<WorkflowFailure, E>,
  before: StepAction<E>[],
) => [Recovering<E>] | [Recovering<E>, Recovering<E>];

/**
 * How a step's failure is handled: `retry` sends a retriable failure back to the step (through its backoff state)
 * while it has retries left; then `onError` — `fail` the list (default), `continue` to the next step without its
 * output, or jump to a later step. A failure that does not fail the list is kept in `errors`
 * (`steps.<id>.error` in conditions).
 */
export function recoveryOf(
  step: StepConfig,
  scope: ListScope,
  next: string,
  resolve: (id: string) => string,
): Recovery {
  const onError = onErrorOf(step);
  const retry = step.kind === 'agent' ? step.retry : undefined;
  return <E extends EventObject>(failure: ContextParam<WorkflowFailure, E>, before: StepAction<E>[]) => {
    const resolved = (args: Args<E>) => (typeof failure === 'function' ? failure(args) : failure);
    const keep = assignFor<E>(({ context, event }) => ({
      errors: { ...context.errors, [step.id]: resolved({ context, event }) },
    }));
    const settled: Recovering<E> =
      onError === undefined || onError === 'fail'
        ? failing(scope, before, failure)
        : { target: onError === 'continue' ? next : resolve(onError), actions: [...before, keep] };
    if (!retry) return [settled];
    const retried: Recovering<E> = {
      when: ({ context }, retriable) => retriable && retriesOf(context, step) < retry.max,
      target: `#${retryKey(step)}`,
      actions: [
        ...before,
        assignFor<E>(({ context }) => ({
          attempts: { ...context.attempts, [attemptKey(context, step)]: retriesOf(context, step) + 1 },
        })),
      ],
    };
    return [retried, settled];
  };
}

/** What a step's `onError` says, for the kinds that have one. */
function onErrorOf(step: StepConfig): string | undefined {
  switch (step.kind) {
    case 'agent':
    case 'parallel':
    case 'human':
    case 'pipeline':
    case 'foreach':
      return step.onError;
    default:
      return undefined;
  }
}

/** A transition that fails the list after `before` (its step's records), as the scope fails it. */
export function failing<E extends EventObject>(
  scope: ListScope,
  before: StepAction<E>[],
  failure: ContextParam<WorkflowFailure, E>,
): { target: string; actions: StepAction<E>[] } {
  const transition = scope.fail(failure);
  return { target: transition.target, actions: [...before, ...transition.actions] };
}

/** The key of the state a step waits in before it is retried. */
export const retryKey = (step: Pick<StepConfig, 'id'>) => `retry:${step.id}`;
const attemptKey = (context: WorkflowContext, step: Pick<StepConfig, 'id'>) => `${step.id}.${context.round}`;
/** How many times the step has been retried in this round. */
export const retriesOf = (context: WorkflowContext, step: Pick<StepConfig, 'id'>) =>
  context.attempts?.[attemptKey(context, step)] ?? 0;

/**
 * The state a step waits in before its next attempt: `backoff` seconds before the first retry, doubling. The wait is
 * an invoked actor (on the workflow's clock), not an `after` timer: a task restored from a checkpoint in this state
 * starts it again (xstate does not restore timers), so the retry still comes.
 */
export function retryState(
  step: AgentStepConfig,
  retry: NonNullable<AgentStepConfig['retry']>,
): WorkflowState {
  return {
    id: retryKey(step),
    invoke: {
      src: 'backoff',
      input: ({ context }) => ({
        ms: Math.round(retry.backoff * 1_000 * 2 ** (retriesOf(context, step) - 1)),
        // The run it waits for (its retries counted already): at work meanwhile, for the messages told to it.
        stepId: stepId(context, step),
      }),
      onDone: { target: `#${step.id}` },
    },
  };
}
