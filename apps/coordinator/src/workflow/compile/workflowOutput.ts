import { isWork } from '../../config/flowLayout.ts';
import type { PipelineConfig, StepConfig } from '../../config/pipelineSchema.ts';
import type { WorkflowContext, WorkflowOutput } from '../workflowTypes.ts';

/** What a workflow ends with: how it ended, its last work step's output, and what it spent. */
export function workflowOutput(config: PipelineConfig, context: WorkflowContext): WorkflowOutput {
  const lastWork = [...config.flow].reverse().find((s) => isWork(s) && context.latest[s.id]);
  const outputRef = lastWork ? context.latest[lastWork.id]?.outputRef : undefined;
  return {
    status: context.released
      ? 'released'
      : context.cancelled
        ? 'cancelled'
        : context.failure
          ? 'failed'
          : 'completed',
    output: lastWork ? (context.latest[lastWork.id]?.output ?? '') : '',
    ...(outputRef ? { outputRef } : {}),
    approved: context.approved,
    rounds: context.round,
    usage: context.usage,
    usageByAgent: context.usageByAgent,
    ...(context.failure ? { failure: context.failure } : {}),
    ...(context.cancelled?.reason === undefined ? {} : { cancelReason: context.cancelled.reason }),
    ...(context.released ? { released: context.released.why } : {}),
    ...(context.askedPeople ? { askedPeople: true } : {}),
  };
}

/** The outputs with a step's own: what a step holding steps (parallel, foreach) gives, as JSON. */
export function withOutput(
  context: WorkflowContext,
  step: Pick<StepConfig, 'id'>,
  agent: string,
  output: unknown,
): Pick<WorkflowContext, 'latest'> {
  return {
    latest: {
      ...context.latest,
      [step.id]: { step: step.id, agent, round: context.round, output: JSON.stringify(output) },
    },
  };
}
