import { allSteps, type StepPlace } from '../../config/flowLayout.ts';
import type { ReviewStepConfig } from '../../config/pipelineSchema.ts';
import type { Compiling, StepAt } from '../compile/flowList.ts';
import { failing } from '../compile/recovery.ts';
import { assignFor, type StepDone, type Transition, type WorkflowStates } from '../compile/workflowSetup.ts';
import { askAgent, record } from './agent.ts';

/**
 * A review step: its agent's verdict picks the next state. Approve moves on; reject goes back to `onReject` with the
 * feedback, for at most `maxRounds` rounds, then fails (or completes unapproved, as `onMaxRounds` says).
 */
export function compileReview(c: Compiling, step: ReviewStepConfig, at: StepAt): WorkflowStates {
  return { [step.id]: askAgent(c, step, at, verdictTransitions(step, reworked(at.place, step), at)) };
}

/** The steps a review's rejection runs again: from its `onReject` to the review, branches included. */
function reworked(place: StepPlace, step: ReviewStepConfig): string[] {
  const from = place.list.findIndex((s) => s.id === step.onReject);
  return allSteps(place.list.slice(Math.max(0, from), place.index + 1)).map((s) => s.id);
}

function verdictTransitions(
  step: ReviewStepConfig,
  stale: readonly string[],
  { next, resolve, scope }: StepAt,
): Transition<StepDone>[] {
  const verdictOf = (event: StepDone) => (event.output.ok ? event.output.verdict : undefined);
  const atBound = ({ context }: { context: { rejections: Record<string, number> } }) =>
    (context.rejections[step.id] ?? 0) + 1 >= step.maxRounds;
  const unapproved = assignFor<StepDone>(() => ({ approved: false }));
  return [
    {
      guard: ({ event }) => verdictOf(event) === undefined,
      ...failing(scope, record(step), {
        reason: 'invalid_output',
        message: `review ${step.id} returned no verdict`,
        step: step.id,
      }),
    },
    {
      guard: ({ event }) => verdictOf(event)?.decision === 'approve',
      target: next,
      actions: [...record(step), 'recordApproval'],
    },
    {
      guard: (args) => !atBound(args),
      target: resolve(step.onReject),
      actions: [
        ...record(step),
        {
          type: 'recordRejection',
          params: ({ event }) => ({ step, feedback: verdictOf(event)?.feedback ?? '', stale }),
        },
      ],
    },
    step.onMaxRounds === 'complete'
      ? { target: scope.exit, actions: [...record(step), unapproved] }
      : failing(scope, [...record(step), unapproved], ({ event }) => ({
          reason: 'max_rounds',
          message: `review ${step.id} rejected the work in all ${step.maxRounds} rounds; last feedback: ${verdictOf(event)?.feedback ?? ''}`,
          step: step.id,
        })),
  ];
}
