import {
  type AgentStepReply,
  type AgentStepRequest,
  errorMessage,
  isStepErrorCode,
  type StepErrorCode,
  type UsageTotals,
} from '@troupe/protocol';
import type { AgentOutput } from './agentMachine.ts';
import { timeBudgetMessage } from './stepBudget.ts';
import { bestEffort, type StepContext } from './stepContext.ts';

/**
 * The reply for the workflow, from what the agent actor ended with: done, failed or stopped (paused, say); `toldRead`,
 * the told messages its agent read, so the workflow sends them to no later step.
 */
export function toReply(
  stepId: string,
  output: AgentOutput,
  toldRead: readonly string[] = [],
): AgentStepReply {
  const usage = stepUsage(output);
  const read = toldRead.length > 0 ? { toldRead: [...toldRead] } : {};
  if (!output.ok || output.failure) {
    return {
      ok: false,
      stepId,
      error: output.failure ?? { code: 'failed', message: 'agent failed' },
      usage,
      turns: output.turns,
      ...read,
    };
  }
  return {
    ok: true,
    stepId,
    output: output.output,
    ...(output.verdict ? { verdict: output.verdict } : {}),
    ...(output.structured === undefined ? {} : { structured: output.structured }),
    usage,
    turns: output.turns,
    ...read,
  };
}

/**
 * What the step spent, as the protocol's totals: the tokens summed over its model calls and summaries, cache reads
 * and writes apart (a total keeps no split of the writes by lifetime: their cost is already in `costUsd`).
 */
function stepUsage(output: AgentOutput): UsageTotals {
  const { inputTokens, outputTokens, cachedTokens, cacheWriteTokens } = output.usage;
  return {
    inputTokens,
    outputTokens,
    cachedTokens,
    ...(cacheWriteTokens ? { cacheWriteTokens } : {}),
    costUsd: output.costUsd,
    modelCalls: output.turns + output.compactions,
  };
}

/**
 * The reply with whether its step may have asked a person (`askedPeople`): this run asked one, or another run of the
 * step may have come before it (the request was not `fresh`), whose asks this run cannot know.
 */
export function withAskedPeople(
  reply: AgentStepReply,
  request: AgentStepRequest,
  askedHere: boolean,
): AgentStepReply {
  return { ...reply, askedPeople: askedHere || request.fresh !== true };
}

/** A step that failed before its agent did anything. */
export function failedReply(stepId: string, code: StepErrorCode, message: string): AgentStepReply {
  return {
    ok: false,
    stepId,
    error: { code, message },
    usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
    turns: 0,
  };
}

/** An actor that failed outright (a service missing, an action that threw): its error's step code, else `agent_crashed`. */
export function crashedReply(request: AgentStepRequest, error: unknown): AgentStepReply {
  const code = (error as { code?: unknown } | undefined)?.code;
  return failedReply(request.stepId, isStepErrorCode(code) ? code : 'agent_crashed', errorMessage(error));
}

/**
 * The task ran out of time before this run of the step began (it resumed after its deadline): nothing runs, and
 * the reply counts what earlier runs of the step had spent, as the journal recorded it.
 */
export async function outOfTimeReply(step: StepContext): Promise<AgentStepReply> {
  const { agent, request, deps } = step;
  const reply = failedReply(request.stepId, 'budget_exceeded', timeBudgetMessage(agent.name, request.budget));
  const spent = await bestEffort(step, 'read what earlier runs spent', () =>
    deps.journal?.spent(request.stepId),
  );
  return spent ? { ...reply, usage: spent } : reply;
}
