import type { ToolCall } from '@troupe/llm';
import type { ApprovalDecision, ConversationSummary, ToolResult } from '@troupe/protocol';
import type { WaitingOn } from '../approvals/humanGate.ts';
import { StepTimedOutError } from '../approvals/stepTimedOutError.ts';
import { TaskEndedError } from '../approvals/taskEnded.ts';
import type {
  AgentServices,
  ApprovalsInput,
  CallDecision,
  CompactionInput,
  ModelCallInput,
  ModelCallOutput,
  RunToolsInput,
  StepStop,
} from './agentMachine.ts';
import { AgentStepError } from './agentStepError.ts';
import { callModel, summarize } from './journaledModel.ts';
import { stepTools, type ToolServices } from './journaledTools.ts';
import { RecordedReplies } from './recordedReplies.ts';
import { timeBudgetMessage } from './stepBudget.ts';
import type { StepContext } from './stepContext.ts';

/**
 * What serves one step's agent actor: its journaled model and tools, whom it waits on, and the signal that tells what
 * waits on a person why the step stopped. One object, its parts made when first needed: a step waiting on its model
 * (a parked task's, most often) holds the step's context and its recorded replies here, not a tool executor with its
 * maps and run id, nor a stop signal, both made at its first tool call or stop.
 */
export class StepServices implements AgentServices {
  readonly #step: StepContext;
  readonly #replies: RecordedReplies;
  #stopped: AbortController | undefined;
  #tools: ToolServices | undefined;

  constructor(step: StepContext) {
    const { deps, request } = step;
    this.#step = step;
    this.#replies = new RecordedReplies(deps.journal, request.stepId, request.fresh === true);
  }

  callModel(input: ModelCallInput, signal: AbortSignal): Promise<ModelCallOutput> {
    return callModel(this.#step, this.#replies, input, signal);
  }

  compactConversation(input: CompactionInput, signal: AbortSignal): Promise<ConversationSummary> {
    return summarize(this.#step, input, signal);
  }

  checkTools(input: { calls: readonly ToolCall[] }): Promise<CallDecision[]> {
    return this.#toolServices().checkTools(input);
  }

  awaitApprovals(input: ApprovalsInput, signal: AbortSignal): Promise<Record<string, ApprovalDecision>> {
    return this.#toolServices().awaitApprovals(input, signal);
  }

  runTools(input: RunToolsInput, signal: AbortSignal): Promise<ToolResult[]> {
    return this.#toolServices().runTools(input, signal);
  }

  waitingOn(): WaitingOn | undefined {
    return this.#step.deps.human?.waitingOn?.(this.#step.request.stepId);
  }

  stopping(stop: StepStop): void {
    this.#stopSignal().abort(abortReason(stop, this.#step));
  }

  #toolServices(): ToolServices {
    this.#tools ??= stepTools(this.#step, this.#replies, this.#stopSignal().signal);
    return this.#tools;
  }

  /** Aborted when the step stops, with a reason that names why, for what waits on a person to record. */
  #stopSignal(): AbortController {
    this.#stopped ??= new AbortController();
    return this.#stopped;
  }
}

/** The abort reason a stop gives what waits on a person, in the form that names it in their record. */
function abortReason(stop: StepStop, { agent, request }: StepContext): Error {
  switch (stop.why) {
    case 'task_ended':
      return new TaskEndedError(stop.taskId, stop.ending);
    case 'deadline':
      return new AgentStepError('budget_exceeded', timeBudgetMessage(agent.name, request.budget));
    case 'step_timeout':
      return new StepTimedOutError(request.stepId);
    default:
      return new AgentStepError('aborted', `step ${request.stepId} was stopped (${stop.why})`);
  }
}
