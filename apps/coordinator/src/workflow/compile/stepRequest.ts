import type { AgentStepRequest, StepBudget, StepOutput, UsageTotals } from '@troupe/protocol';
import { emptyUsage, sumUsage } from '@troupe/protocol';
import type { StepPlace } from '../../config/flowLayout.ts';
import type {
  AgentAskedStep,
  AgentStepConfig,
  PipelineConfig,
  StepConfig,
} from '../../config/pipelineSchema.ts';
import { routerAsk } from '../steps/route.ts';
import type { WorkflowContext, WorkflowInput } from '../workflowTypes.ts';
import { retriesOf } from './recovery.ts';

/**
 * `<taskId>.<step>.<round>`, and `-r<n>` for its n-th retry (a fresh run, with a journal of its own); a foreach step's
 * item adds `.i<index>`, so each item's run of a step is a step of its own.
 */
export const stepId = (context: WorkflowContext, step: Pick<StepConfig, 'id'>): string => {
  const retries = retriesOf(context, step);
  const item = context.item === undefined ? '' : `.i${context.item.index}`;
  return `${context.task.taskId}.${step.id}.${context.round}${retries > 0 ? `-r${retries}` : ''}${item}`;
};

/** The request for an agent's step: the task, the outputs it may see, and the reviewer's feedback when reworking. */
export function buildRequest(
  config: PipelineConfig,
  context: WorkflowContext,
  step: AgentAskedStep,
  place: StepPlace,
): AgentStepRequest {
  const visible = step.context ?? place.before;
  const own = context.latest[step.id] ?? context.previous?.[step.id];
  const outputs = [...visible.map((id) => context.latest[id]), ...(own ? [own] : [])].filter(
    (o): o is StepOutput => o !== undefined,
  );
  const reworking = context.approved === false && context.feedback !== undefined;
  return {
    stepId: stepId(context, step),
    taskId: context.task.taskId,
    pipeline: context.task.pipeline,
    agent: step.agent,
    step: step.id,
    round: context.round,
    goal: context.task.goal,
    ...(context.task.input ? { input: context.task.input } : {}),
    ...(context.task.inputCut ? { inputCut: context.task.inputCut } : {}),
    context: outputs,
    ...(reworking && step.kind === 'agent' ? { feedback: context.feedback } : {}),
    expect: step.kind === 'review' ? 'verdict' : 'text',
    ...budgetFor(config, context, step.agent, step.kind === 'agent' ? step : undefined),
    priorModelCalls: agentSpent(context, step.agent).modelCalls,
    ...(context.lastAgent ? { from: context.lastAgent } : {}),
    traceparent: context.task.traceparent,
    ...(step.kind === 'route' ? routerAsk(step) : {}),
    ...(context.workspace ? { workspace: context.workspace } : {}),
  };
}

/**
 * The task with keys laid over its input (an item's, a sub-task's). A key laid over one cut to a preview is no
 * longer cut: the stored whole is not put back over it.
 */
export function withInput(task: WorkflowInput, over: Record<string, unknown>): WorkflowInput {
  const { inputCut, ...rest } = task;
  const input = { ...task.input, ...over };
  const keys = inputCut?.keys.filter((key) => !(key in over)) ?? [];
  return { ...rest, input, ...(inputCut && keys.length > 0 ? { inputCut: { ...inputCut, keys } } : {}) };
}

/** What the task has spent: in an item's workflow, what it had when the item started and what the item has. */
export const taskSpent = (context: WorkflowContext): UsageTotals =>
  context.spent ? sumUsage(context.spent.usage, context.usage) : context.usage;

const agentSpent = (context: WorkflowContext, agent: string): UsageTotals =>
  sumUsage(context.spent?.byAgent[agent] ?? emptyUsage(), context.usageByAgent[agent] ?? emptyUsage());

/** What the step may still spend: the tightest of the task's remaining budget, the agent's, and the step's own. */
function budgetFor(
  config: PipelineConfig,
  context: WorkflowContext,
  agent: string,
  step?: AgentStepConfig,
): { budget?: StepBudget } {
  const task = config.budget;
  const own = config.agents[agent]?.budget;
  // A step's own budget is for each run of it: nothing of it is spent when the step is sent.
  const mine = step?.budget;
  const spent = taskSpent(context);
  const spentByAgent = agentSpent(context, agent);
  const budget: StepBudget = { sources: {} };
  const limit = (
    key: 'tokens' | 'costUsd' | 'modelCalls',
    candidates: [number | undefined, number, string][],
  ) => {
    for (const [max, spent, source] of candidates) {
      if (max === undefined) continue;
      const left = Math.max(0, max - spent);
      const current = budget[key];
      if (current === undefined || left < current) {
        budget[key] = left;
        budget.sources[key] = source;
      }
    }
  };
  const tokens = (u: UsageTotals) => u.inputTokens + u.outputTokens;
  limit('tokens', [
    [task?.maxTokens, tokens(spent), `the task budget of ${task?.maxTokens} tokens`],
    [own?.maxTokens, tokens(spentByAgent), `agent ${agent}'s budget of ${own?.maxTokens} tokens`],
    [mine?.maxTokens, 0, `step ${step?.id}'s budget of ${mine?.maxTokens} tokens`],
  ]);
  limit('costUsd', [
    [task?.maxCostUsd, spent.costUsd, `the task budget of $${task?.maxCostUsd}`],
    [own?.maxCostUsd, spentByAgent.costUsd, `agent ${agent}'s budget of $${own?.maxCostUsd}`],
    [mine?.maxCostUsd, 0, `step ${step?.id}'s budget of $${mine?.maxCostUsd}`],
  ]);
  limit('modelCalls', [
    [task?.maxModelCalls, spent.modelCalls, `the task budget of ${task?.maxModelCalls} model calls`],
    [
      own?.maxModelCalls,
      spentByAgent.modelCalls,
      `agent ${agent}'s budget of ${own?.maxModelCalls} model calls`,
    ],
    [mine?.maxModelCalls, 0, `step ${step?.id}'s budget of ${mine?.maxModelCalls} model calls`],
  ]);
  if (context.task.deadline !== undefined) {
    budget.deadline = context.task.deadline;
    budget.sources.deadline = `the task's wall-clock budget of ${task?.timeout} s`;
  }
  return Object.keys(budget.sources).length > 0 ? { budget } : {};
}
