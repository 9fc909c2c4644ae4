// The limits a step runs within: its budget and turns, checked before each model call; its time, a delayed event;
// its task's pause, at each call boundary.
import type { AgentContext, AgentFailure, AgentMachineInput, StepStop } from './agentContext.ts';
import { pausedFailure } from './agentFailures.ts';
import { spentBudget } from './stepBudget.ts';

/** Before any model call: a step whose budget is spent ends `budget_exceeded`, naming the limit. */
export const stopWhenBudgetSpent = {
  guard: { type: 'budgetSpent' },
  target: '#agent.failed',
  actions: {
    type: 'fail',
    params: ({ context }: { context: AgentContext }): AgentFailure => ({
      code: 'budget_exceeded',
      message: `agent ${context.agent}: ${spentBudget(context.budget, context)}; no further model call was made`,
    }),
  },
} as const;

/** At a call boundary: a step whose task was paused stops here, failing `paused` (see `AgentEvent`). */
export const stopWhenPaused = {
  guard: { type: 'pauseAsked' },
  target: '#agent.stopped',
  actions: { type: 'fail', params: ({ context }: { context: AgentContext }) => pausedFailure(context) },
} as const;

/** No turn left: the step ends `max_steps`. */
export const outOfTurns = {
  target: '#agent.failed',
  actions: {
    type: 'fail',
    params: ({ context }: { context: AgentContext }): AgentFailure => ({
      code: 'max_steps',
      message: `agent ${context.agent} reached its limit of ${context.maxTurns} model calls without finishing`,
    }),
  },
} as const;

/**
 * The delay of a step without a time limit. `after` raises an event whose delay is not a number at once, instead
 * of setting a timer, and the `timeLimited` guard then ignores it: no timer is held for the step's lifetime.
 */
export const NO_TIME_LIMIT = undefined as unknown as number;

/** The nearer of the step's two time limits, from its start; undefined when it has neither. */
export function timeLimit(context: AgentMachineInput): { ms: number; stop: StepStop } | undefined {
  const { timeLeftMs, timeoutMs } = context;
  if (timeLeftMs === undefined && timeoutMs === undefined) return undefined;
  if (timeoutMs === undefined || (timeLeftMs !== undefined && timeLeftMs <= timeoutMs)) {
    return { ms: timeLeftMs ?? 0, stop: { why: 'deadline' } };
  }
  return { ms: timeoutMs, stop: { why: 'step_timeout' } };
}

/** Milliseconds until the step's nearer time limit from this actor's start: a woken step's ran part of them parked. */
export function timeLeft(context: AgentContext): number {
  const limit = timeLimit(context);
  return limit === undefined ? NO_TIME_LIMIT : Math.max(0, limit.ms - (context.ranMs ?? 0));
}

/** Whether the step has spent its budget (a model call, tokens or money) already. */
export const budgetSpent = (context: AgentContext): boolean =>
  spentBudget(context.budget, context) !== undefined;
