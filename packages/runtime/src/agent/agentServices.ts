import type { ChatMessage, ToolCall, ToolDefinition } from '@troupe/llm';
import type { ApprovalDecision, ConversationSummary, ModelReply, ToolResult } from '@troupe/protocol';
import type { ApprovalAsk } from '../approvals/approvalAsk.ts';
import type { WaitingOn } from '../approvals/humanGate.ts';
import type { AgentContext, StepStop } from './agentContext.ts';
import type { OutputSpec } from './structuredReply.ts';

/** The policy's word on one call before it runs. */
export interface CallDecision {
  callId: string;
  tool: string;
  decision: 'allow' | 'deny' | 'ask';
  reason: string;
}

export interface RunToolsInput {
  calls: readonly ToolCall[];
  turn: number;
  approvals?: Readonly<Record<string, ApprovalDecision>>;
}

/**
 * The work an agent step invokes, given in the actor's input: one machine serves every step, with no `.provide()`
 * (which rebuilds the machine) per step. Each is called as a method of the object given (the host's is a
 * `StepServices`, whose methods need their `this`). Without `checkTools` every call may run (the executor still checks);
 * without `awaitApprovals` every `ask` call is denied. Tests may instead `.provide()` the actors themselves.
 */
export interface AgentServices {
  callModel(input: ModelCallInput, signal: AbortSignal): Promise<ModelCallOutput>;
  runTools(input: RunToolsInput, signal: AbortSignal): Promise<ToolResult[]>;
  /** Summarizes older turns (it calls the agent's model). */
  compactConversation(input: CompactionInput, signal: AbortSignal): Promise<ConversationSummary>;
  checkTools?(input: { calls: readonly ToolCall[] }): Promise<CallDecision[]>;
  awaitApprovals?(input: ApprovalsInput, signal: AbortSignal): Promise<Record<string, ApprovalDecision>>;
  /** Whom the step waits on now, if a person: a step timeout then is theirs (`approval_timeout`). */
  waitingOn?(): WaitingOn | undefined;
  /** Told of a stop before what the step invoked is stopped, so what waits on a person can record why. */
  stopping?(stop: StepStop): void;
}

/** The `ask` calls of a turn, waiting for a person. */
export interface ApprovalsInput {
  calls: ApprovalAsk[];
  turn: number;
}

export interface ModelCallInput {
  messages: ChatMessage[];
  tools: ToolDefinition[];
  turn: number;
  /** Model calls the agent made earlier in this step (turns and summaries). */
  callsBefore: number;
  responseSchema?: OutputSpec | undefined;
}

/**
 * A turn's model reply, with `told`: the user turns (messages people told the task) read into the conversation just
 * before the model was asked, which the reply answered. They join the conversation ahead of it.
 */
export type ModelCallOutput = ModelReply & { told?: ChatMessage[] };

export interface CompactionInput {
  /** The older turns to summarize. */
  messages: ChatMessage[];
  /** Which compaction of the step this is, from 1. */
  index: number;
  /** Model calls the agent made earlier in this step. */
  callsBefore: number;
}

/** What an invoked actor gets besides its own input: the step's services, when the input gave them. */
export type Served<T> = T & { services?: AgentServices };

/** The step's services as an invoked actor's input carries them: none when the step's input gave none. */
export const servicesOf = (context: AgentContext): { services?: AgentServices } =>
  context.services ? { services: context.services } : {};

/** The step's services, which have `name`: each is called as a method of the object the input gave. */
export function servicesWith<K extends keyof AgentServices>(
  input: Served<unknown>,
  name: K,
): AgentServices & Required<Pick<AgentServices, K>> {
  const services = input.services;
  if (services?.[name] === undefined) throw new Error(`${name} is not provided`);
  return services as AgentServices & Required<Pick<AgentServices, K>>;
}
