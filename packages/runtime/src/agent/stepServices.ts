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
import { type ModelCallEnds, ModelCallInFlight } from './modelCallInFlight.ts';
import { RecordedReplies } from './recordedReplies.ts';
import { timeBudgetMessage } from './stepBudget.ts';
import type { StepContext } from './stepContext.ts';

/** Who hears of a step's model calls: each one's start and its end (a reply or a failure). */
export interface ModelCallWatcher {
  modelCallStarted(): void;
  modelCallEnded(): void;
}

/**
 * What serves one step's agent actor: its journaled model and tools, whom it waits on, and the signal that tells what
 * waits on a person why the step stopped. One object, its parts made when first needed: a step waiting on its model
 * (a parked task's, most often) holds the step's context and its recorded replies here, not a tool executor with its
 * maps and run id, nor a stop signal, both made at its first tool call or stop. Its model call in flight is held here,
 * not by the actor that asked for it, so a parked step's actor may be stopped and a woken one adopt the call.
 */
export class StepServices implements AgentServices, ModelCallEnds {
  readonly #step: StepContext;
  readonly #replies: RecordedReplies;
  #stopped: AbortController | undefined;
  #tools: ToolServices | undefined;
  #modelCall: ModelCallInFlight | undefined;
  #watcher: ModelCallWatcher | undefined;

  constructor(step: StepContext) {
    const { deps, request } = step;
    this.#step = step;
    this.#replies = new RecordedReplies(deps.journal, request.stepId, request.fresh === true);
  }

  /**
   * The turn's model call: the one in flight for this turn if there is one (an actor woken after its step was parked
   * adopts it: the model is not asked again), else a new one.
   */
  callModel(input: ModelCallInput, signal: AbortSignal): Promise<ModelCallOutput> {
    // A step nobody parks (parking off, or no host) asks with its actor's signal, holding nothing of the call here.
    if (!this.#watcher) return callModel(this.#step, this.#replies, input, signal);
    const inFlight = this.#modelCall;
    if (inFlight?.turn === input.turn) return inFlight.hold(signal);
    const call = new ModelCallInFlight(
      input.turn,
      (own) => callModel(this.#step, this.#replies, input, own),
      this,
    );
    this.#modelCall = call;
    this.#watcher.modelCallStarted();
    return call.hold(signal);
  }

  /**
   * The model call in flight ended, heard before the actor holding it hears it: a parked step's actor is woken now
   * and adopts the call, its reply settled, before the call is let go.
   */
  callEnded(call: ModelCallInFlight): void {
    this.#watcher?.modelCallEnded();
    if (this.#modelCall === call) this.#modelCall = undefined;
  }

  /** Tells `watcher` of each model call's start and end from now on (the run that may park the step). */
  watchModelCalls(watcher: ModelCallWatcher): void {
    this.#watcher = watcher;
  }

  /** The actor holding the model call in flight is about to be stopped (its step parked): the call goes on. */
  detachModelCall(): void {
    this.#modelCall?.detach();
  }

  /** The step's parked actor cannot be woken to take its model call in flight: the call is aborted. */
  abortModelCall(reason: unknown): void {
    this.#modelCall?.abort(reason);
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
