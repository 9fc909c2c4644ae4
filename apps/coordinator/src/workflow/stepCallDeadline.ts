import { type AgentStepReply, emptyUsage } from '@troupe/protocol';
import type { Clock } from '@troupe/runtime';
import type { StepCallContext } from './stepCall.ts';

/** What of a step call says when the task's deadline falls: its request, and whether held time counts. */
type DeadlineOf = Pick<StepCallContext, 'request' | 'pausedTimeCounts'> &
  Partial<Pick<StepCallContext, 'spent'>>;

/**
 * The task's deadline as it stands while the task is held, when the pipeline counts held time against it
 * (`budget.pausedTimeCounts`); undefined when held time moves it on (the default), or the task has none.
 */
export function heldDeadline({ request, pausedTimeCounts }: DeadlineOf): number | undefined {
  return pausedTimeCounts === true ? request.budget?.deadline : undefined;
}

/**
 * Calls `past` when the task's deadline passes while its step is held (see {@link heldDeadline}); returns how to stop
 * watching. Nothing is watched when held time does not count.
 */
export function watchHeldDeadline(clock: Clock, deadline: number | undefined, past: () => void): () => void {
  if (deadline === undefined) return () => {};
  const timer = clock.setTimeout(past, Math.max(0, deadline - clock.now()));
  return () => clock.clearTimeout(timer);
}

/**
 * The reply of a step whose task ran out of time, held time counted: `budget_exceeded`, as the agent's own reply is
 * when the deadline passes at work, so the task ends as any task past its deadline does. The step call gives it when
 * the deadline passes while the task is held (at once for a step restored held after it), with what the step spent
 * as its agent's last `paused` reply said.
 */
export function pastDeadlineReply({ request, spent }: DeadlineOf): AgentStepReply {
  const source = request.budget?.sources.deadline ?? 'the task wall-clock budget';
  return {
    ok: false,
    stepId: request.stepId,
    error: {
      code: 'budget_exceeded',
      message: `agent ${request.agent}: ${source} ran out, the time the task was paused counted (budget.pausedTimeCounts); the step was stopped`,
    },
    // What its agent said it spent when it stopped for the pause; a step ended at work spent what its host has not
    // said yet (its heartbeats carry no usage), which is lost to the task's totals.
    usage: spent?.usage ?? emptyUsage(),
    turns: spent?.turns ?? 0,
  };
}
