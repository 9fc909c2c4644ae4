import { errorMessage, isStepErrorCode, type StepErrorCode } from '@troupe/protocol';
import type { AgentContext, AgentFailure, StepStop } from './agentContext.ts';
import { timeBudgetMessage } from './stepBudget.ts';
import { stepTimeoutError } from './stepTimeout.ts';
import { outputSchemaOf } from './structuredReply.ts';

/** Why a paused step stopped: not a failure, the workflow holds it and sends it again on resume. */
export function pausedFailure(context: AgentContext): AgentFailure {
  return {
    code: 'paused',
    message: `step ${context.stepId} was paused after ${context.turn} model call(s): its task was paused; sent again on resume, it goes on from its journal`,
  };
}

/** How a stopped step failed, by why it stopped; what it spent is in the output beside it. */
export function stoppedFailure(context: AgentContext, stop: StepStop): AgentFailure {
  switch (stop.why) {
    case 'deadline':
      return { code: 'budget_exceeded', message: timeBudgetMessage(context.agent, context.budget) };
    case 'step_timeout':
      return stepTimeoutError(context.agent, context.timeoutMs ?? 0, context.services?.waitingOn?.());
    case 'worker_stopping':
      return { code: 'worker_stopped', message: `the worker serving ${context.agent} stopped mid-step` };
    default: {
      const because =
        stop.why === 'task_ended'
          ? ': its task has ended'
          : stop.why === 'orphaned'
            ? ': nobody waits for its reply any more'
            : '';
      return {
        code: 'aborted',
        message: `step ${context.stepId} was aborted after ${context.turn} model call(s)${because}`,
      };
    }
  }
}

/** A failed model call: the journal's circumstance, else the error's own code when steps know it. */
export function modelCallFailed(context: AgentContext, error: unknown): AgentFailure {
  return (
    journalFailure(context, error) ?? {
      code: failureCode(error),
      message: `agent ${context.agent}: model call failed: ${errorMessage(error)}`,
    }
  );
}

/** A failed summary: the conversation outgrew its budget and could not be condensed. */
export function compactionFailed(context: AgentContext, error: unknown): AgentFailure {
  return (
    journalFailure(context, error) ?? {
      code: 'compaction_failed',
      message: `agent ${context.agent}: the conversation outgrew its context budget and could not be summarized: ${errorMessage(error)}`,
    }
  );
}

/** A failed check, approval or tool run. */
export function toolRunnerFailed(context: AgentContext, error: unknown): AgentFailure {
  return (
    journalFailure(context, error) ?? {
      code: 'tool_runner_failed',
      message: `agent ${context.agent}: the tool runner failed: ${errorMessage(error)}`,
    }
  );
}

/**
 * The journal out of reach, or holding a record only a newer host can read, is the step's circumstance, not its
 * failure, wherever the step met it (a model call, a summary, a tool call): `journal_unavailable`, which the workflow
 * sends again; undefined for any other error.
 */
function journalFailure(context: AgentContext, error: unknown): AgentFailure | undefined {
  if (errorCode(error) !== 'journal_unavailable') return undefined;
  return { code: 'journal_unavailable', message: `agent ${context.agent}: ${errorMessage(error)}` };
}

/** An error's own code, as `llm.error` names it; `model_failed` when it has none. */
export function errorCode(error: unknown): string {
  const code = (error as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' ? code : 'model_failed';
}

/** The step's code for a failed model call: the error's own when steps know it, else `model_failed`. */
function failureCode(error: unknown): StepErrorCode {
  const code = errorCode(error);
  return isStepErrorCode(code) ? code : 'model_failed';
}

/** What was wrong with the last reply a structured step got, for the message of its failure: `; target: …`. */
export function whyNotMatching(context: AgentContext): string {
  const last = context.messages.at(-1);
  if (last?.role !== 'assistant') return '';
  const schema = outputSchemaOf(context);
  let value: unknown = last.content;
  try {
    value = JSON.parse(last.content);
  } catch {
    // Not JSON: the schema says what it wanted of the text.
  }
  const issue = schema?.safeParse(value).error?.issues[0];
  const where = issue ? `${issue.path.join('.') || 'the reply'}: ${issue.message}` : 'no JSON value in it';
  return `; ${where} (its last reply: ${JSON.stringify(last.content.slice(0, 200))})`;
}
