import type { ChatMessage, ToolCall, ToolDefinition, Usage } from '@troupe/llm';
import { zeroUsage } from '@troupe/llm';
import type {
  ApprovalDecision,
  ConversationSummary,
  ModelReply,
  StepBudget,
  StepErrorCode,
  StepExpect,
  TaskEnding,
  ToolResult,
  Verdict,
} from '@troupe/protocol';
import type { AgentServices, CallDecision } from './agentServices.ts';
import type { OutputSpec } from './structuredReply.ts';

export interface AgentMachineInput {
  agent: string;
  stepId: string;
  messages: ChatMessage[];
  tools: ToolDefinition[];
  /** The most model calls the agent may make in this step. */
  maxTurns: number;
  /** `verdict`: the reply must be a reviewer's verdict. */
  expect: StepExpect;
  /** What the step may still spend; checked before each model call. */
  budget?: StepBudget;
  /** Milliseconds until the task's wall-clock budget runs out (its `budget.deadline`), from the actor's start. */
  timeLeftMs?: number;
  /** Milliseconds the step may run (the request's `timeoutMs`), from the actor's start. */
  timeoutMs?: number;
  /** Estimated tokens the conversation may hold; past it, older turns are summarized by the model. */
  contextTokens?: number;
  /** A JSON Schema the final reply must match (the agent's declared `output`); asked of the provider natively. */
  outputSchema?: OutputSpec;
  /** Does the step's model calls and tool calls; see {@link AgentServices}. */
  services?: AgentServices;
  /**
   * The step's task is paused: the step stops at its next call boundary (see the `pause` event), and its time limits
   * no longer stop it.
   */
  paused?: boolean;
}

/** What a woken step's actor starts from: the parked actor's context, and how long the step had run by its waking. */
export interface WokenStep {
  context: AgentContext;
  ranMs: number;
}

/**
 * What an agent actor starts from: a step's input, or, for a step parked while its model call waited (its actor
 * stopped, see `AgentRun`) and woken, only what it is woken with: the actor starts as the parked one was, in that
 * model call, which it adopts (no `llm.request` again, no second call). XState keeps an actor's input for its life,
 * so a woken actor's holds the parked context once, not a copy of it beside.
 */
export type AgentActorInput = AgentMachineInput | { woken: WokenStep };

/**
 * Why a step stops before its end. The host sends `task_ended` (the task's final event arrived), `orphaned` (no
 * requester has listened for a while) and `worker_stopping`; a library caller may send `aborted`. The actor stops
 * itself with `deadline` (the task's wall-clock budget ran out) and `step_timeout` (the request's `timeoutMs`).
 */
export type StepStop =
  | { why: 'task_ended'; taskId: string; ending: TaskEnding }
  | { why: 'orphaned' }
  | { why: 'worker_stopping' }
  | { why: 'aborted' }
  | { why: 'deadline' }
  | { why: 'step_timeout' };

/**
 * What the agent actor receives from outside: a stop, with its reason, or a pause of its task. A stop cuts short what
 * the step does now; a pause lets its model call or tool calls finish (a tool waiting on a person waits on), and
 * stops it at the next call boundary, before the model is asked again, failing `paused`: its journal holds all it
 * did, so the same step sent again after the task's resume goes on from there. From the pause on, neither the step's
 * timeout nor the task's deadline stops it (a person it waits on may answer late): the workflow that holds it decides
 * about time. Model replies and tool results arrive as its invocations end.
 */
export type AgentEvent = { type: 'stop'; stop: StepStop } | { type: 'pause' } | { type: 'halted' };

export interface AgentFailure {
  code: StepErrorCode;
  message: string;
}

export interface AgentContext extends AgentMachineInput {
  turn: number;
  /** The policy's word on each pending call. */
  checks: readonly CallDecision[];
  /** A person's decision on each `ask` call, by call id. */
  approvals: Readonly<Record<string, ApprovalDecision>>;
  compactions: number;
  usage: Usage;
  costUsd: number;
  pendingCalls: readonly ToolCall[];
  repairs: number;
  output?: string;
  verdict?: Verdict;
  structured?: unknown;
  failure?: AgentFailure;
  /** A woken step's: how long the step ran before this actor started, which its time limits count from their start. */
  ranMs?: number;
}

/** The result of an agent step: what `done`, `failed` or `stopped` leaves behind. */
export interface AgentOutput {
  ok: boolean;
  output: string;
  verdict?: Verdict;
  /** The reply parsed and validated, when an output schema was required. */
  structured?: unknown;
  failure?: AgentFailure;
  messages: ChatMessage[];
  turns: number;
  /** Model calls made to summarize the conversation. */
  compactions: number;
  usage: Usage;
  costUsd: number;
}

/** Events the agent emits for the outside world (the host turns them into wire events). */
export type AgentEmitted =
  | ({
      type: 'context.compacted';
      index: number;
      before: number;
      after: number;
      estimatedTokens: number;
    } & ConversationSummary)
  | { type: 'llm.request'; turn: number; messages: number; tools: string[] }
  | ({ type: 'llm.response'; turn: number } & ModelReply)
  | { type: 'llm.error'; turn: number; code: string; message: string }
  | { type: 'tool.call'; turn: number; index: number; callId: string; tool: string; arguments: string }
  | ({ type: 'tool.result'; turn: number; index: number } & ToolResult);

/**
 * No calls pending, nor checks or approvals of them: one frozen value each for every step's context that has none (a
 * context's values are replaced, never changed), rather than a new empty one per step, a parked step's included.
 */
export const NO_CALLS: readonly ToolCall[] = Object.freeze([]);
export const NO_CHECKS: readonly CallDecision[] = Object.freeze([]);
export const NO_APPROVALS: Readonly<Record<string, ApprovalDecision>> = Object.freeze({});

/** A step's context at its start: its input, before any model call; a woken step's, the parked actor's. */
export function initialContext(input: AgentActorInput): AgentContext {
  if ('woken' in input) return { ...input.woken.context, ranMs: input.woken.ranMs };
  return {
    ...input,
    turn: 0,
    usage: zeroUsage(),
    costUsd: 0,
    pendingCalls: NO_CALLS,
    checks: NO_CHECKS,
    approvals: NO_APPROVALS,
    repairs: 0,
    compactions: 0,
  };
}

/** What a step leaves behind at its end, whichever final state it reached. */
export function agentOutput(context: AgentContext): AgentOutput {
  return {
    ok: context.failure === undefined,
    output: context.output ?? '',
    ...(context.verdict ? { verdict: context.verdict } : {}),
    ...(context.structured === undefined ? {} : { structured: context.structured }),
    ...(context.failure ? { failure: context.failure } : {}),
    messages: context.messages,
    turns: context.turn,
    compactions: context.compactions,
    usage: context.usage,
    costUsd: context.costUsd,
  };
}
