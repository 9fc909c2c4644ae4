import type { Usage } from '@troupe/llm';
import type { StepBudget } from '@troupe/protocol';

/** What a step has spent so far. */
export interface Spent {
  usage: Usage;
  costUsd: number;
  /** Model calls for turns. */
  turn: number;
  /** Model calls for summaries. */
  compactions: number;
}

/**
 * The first limit of the step's budget that is reached, described; undefined while every limit has room. Checked
 * before each model call. Time is not counted here: the agent actor stops itself when the deadline passes.
 */
export function spentBudget(budget: StepBudget | undefined, spent: Spent): string | undefined {
  if (!budget) return undefined;
  const tokens = spent.usage.inputTokens + spent.usage.outputTokens;
  const source = (key: string) => budget.sources[key] ?? `${key} budget`;
  if (budget.tokens !== undefined && tokens >= budget.tokens) {
    return `${source('tokens')} reached (${tokens} of ${budget.tokens} tokens left to this step used)`;
  }
  if (budget.costUsd !== undefined && spent.costUsd >= budget.costUsd) {
    return `${source('costUsd')} reached ($${spent.costUsd.toFixed(4)} of $${budget.costUsd.toFixed(4)} left to this step spent)`;
  }
  // Summaries are model calls too.
  const calls = spent.turn + spent.compactions;
  if (budget.modelCalls !== undefined && calls >= budget.modelCalls) {
    return `${source('modelCalls')} reached (${calls} of ${budget.modelCalls} model calls left to this step made)`;
  }
  return undefined;
}

/** The failure message of a step stopped by the task's wall-clock budget. */
export function timeBudgetMessage(agent: string, budget: StepBudget | undefined): string {
  const source = budget?.sources.deadline ?? 'the task wall-clock budget';
  return `agent ${agent}: ${source} ran out; the step was stopped`;
}
