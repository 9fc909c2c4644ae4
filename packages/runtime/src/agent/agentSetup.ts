import type { ChatMessage, ToolCall } from '@troupe/llm';
import { addUsage } from '@troupe/llm';
import type {
  ApprovalDecision,
  ConversationSummary,
  ModelReply,
  ToolResult,
  Verdict,
} from '@troupe/protocol';
import { assign, enqueueActions, fromPromise, setup } from 'xstate';
import {
  type AgentActorInput,
  type AgentContext,
  type AgentEmitted,
  type AgentEvent,
  type AgentFailure,
  type AgentOutput,
  NO_APPROVALS,
  NO_CALLS,
  NO_CHECKS,
  type StepStop,
} from './agentContext.ts';
import { stoppedFailure } from './agentFailures.ts';
import { budgetSpent, timeLeft, timeLimit } from './agentLimits.ts';
import {
  type ApprovalsInput,
  type CallDecision,
  type CompactionInput,
  type ModelCallInput,
  type ModelCallOutput,
  type RunToolsInput,
  type Served,
  servicesWith,
} from './agentServices.ts';
import { estimateTokens, olderTurns } from './compaction.ts';
import { MAX_REPAIRS, outputSchemaOf, parseStructured, repairPrompt } from './structuredReply.ts';

/**
 * The agent machine's parts, named once for its states (in `modelRound.ts`, `toolRound.ts` and `agentMachine.ts`) to
 * refer to: what it invokes (each a call of the step's services), its guards and its actions.
 */
export const agentSetup = setup({
  types: {
    context: {} as AgentContext,
    input: {} as AgentActorInput,
    output: {} as AgentOutput,
    events: {} as AgentEvent,
    emitted: {} as AgentEmitted,
  },
  actors: {
    callModel: fromPromise<ModelCallOutput, Served<ModelCallInput>>(({ input, signal }) =>
      servicesWith(input, 'callModel').callModel(input, signal),
    ),
    runTools: fromPromise<ToolResult[], Served<RunToolsInput>>(({ input, signal }) =>
      servicesWith(input, 'runTools').runTools(input, signal),
    ),
    compactConversation: fromPromise<ConversationSummary, Served<CompactionInput>>(({ input, signal }) =>
      servicesWith(input, 'compactConversation').compactConversation(input, signal),
    ),
    checkTools: fromPromise<CallDecision[], Served<{ calls: readonly ToolCall[] }>>(async ({ input }) =>
      input.services?.checkTools
        ? input.services.checkTools(input)
        : input.calls.map((call) => ({
            callId: call.id,
            tool: call.name,
            decision: 'allow' as const,
            reason: '',
          })),
    ),
    awaitApprovals: fromPromise<Record<string, ApprovalDecision>, Served<ApprovalsInput>>(
      async ({ input, signal }) =>
        input.services?.awaitApprovals
          ? input.services.awaitApprovals(input, signal)
          : Object.fromEntries(
              input.calls.map((c) => [
                c.callId,
                { decision: 'deny' as const, reason: 'no approval channel is configured' },
              ]),
            ),
    ),
  },
  delays: {
    timeLimit: ({ context }) => timeLeft(context),
  },
  guards: {
    timeLimited: ({ context }) => timeLimit(context) !== undefined,
    /** The actor starts a parked step again, in the model call it had in flight. */
    woken: ({ context }) => context.ranMs !== undefined,
    failureDecided: ({ context }) => context.failure !== undefined,
    turnsLeft: ({ context }) => context.turn < context.maxTurns,
    pauseAsked: ({ context }) => context.paused === true,
    /** The reply asks for tools and the task was paused meanwhile: they run after the resume, not now. */
    pausedBeforeTools: ({ context }, reply: ModelReply) =>
      context.paused === true && reply.toolCalls.length > 0,
    overContext: ({ context }) =>
      context.contextTokens !== undefined &&
      estimateTokens(context.messages) > context.contextTokens &&
      olderTurns(context.messages).length > 0,
    budgetSpent: ({ context }) => budgetSpent(context),
    wantsTools: (_, reply: ModelReply) => reply.toolCalls.length > 0,
    emptyReply: (_, reply: ModelReply) => reply.content.trim() === '',
    outputInvalid: ({ context }, reply: ModelReply) => {
      const schema = outputSchemaOf(context);
      return schema !== undefined && parseStructured(reply.content, schema) === undefined;
    },
    canRepair: ({ context }) => context.repairs < MAX_REPAIRS,
    needsApproval: (_, checks: CallDecision[]) => checks.some((c) => c.decision === 'ask'),
  },
  actions: {
    /**
     * Adds what was told before the model call and the model's reply to the conversation, and what it cost to the
     * step's, and announces the reply.
     */
    recordReply: enqueueActions(({ context, enqueue }, { told, ...reply }: ModelCallOutput) => {
      enqueue.assign({
        usage: addUsage(context.usage, reply.usage),
        costUsd: context.costUsd + reply.costUsd,
        messages: [
          ...context.messages,
          ...(told ?? []),
          {
            role: 'assistant' as const,
            content: reply.content,
            ...(reply.toolCalls.length > 0 ? { toolCalls: reply.toolCalls } : {}),
          },
        ],
        pendingCalls: reply.toolCalls,
      });
      enqueue.emit({ type: 'llm.response', turn: context.turn, ...reply });
    }),
    askForRepair: assign(({ context }) => ({
      repairs: context.repairs + 1,
      messages: [...context.messages, { role: 'user' as const, content: repairPrompt(context) }],
    })),
    finish: assign(({ context }, reply: ModelReply) => {
      const schema = outputSchemaOf(context);
      if (schema === undefined) return { output: reply.content };
      const structured = parseStructured(reply.content, schema);
      return {
        output: reply.content,
        structured,
        ...(context.expect === 'verdict' ? { verdict: structured as Verdict } : {}),
      };
    }),
    fail: assign((_, failure: AgentFailure) => ({ failure })),
    /**
     * The first half of a stop, taken without leaving any state: the failure is decided (a timeout asks whom the
     * step waits on, before that wait is stopped) and the services told; then `halted` leaves `working`.
     */
    halt: enqueueActions(({ context, enqueue }, stop: StepStop) => {
      enqueue.assign({ failure: stoppedFailure(context, stop) });
      enqueue(() => context.services?.stopping?.(stop));
      enqueue.raise({ type: 'halted' });
    }),
    recordChecks: assign((_, checks: CallDecision[]) => ({ checks })),
    recordApprovals: assign((_, approvals: Record<string, ApprovalDecision>) => ({ approvals })),
    recordToolResults: assign(({ context }, results: ToolResult[]) => ({
      pendingCalls: NO_CALLS,
      checks: NO_CHECKS,
      approvals: NO_APPROVALS,
      messages: [
        ...context.messages,
        ...results.map(
          (r): ChatMessage => ({
            role: 'tool',
            toolCallId: r.callId,
            name: r.tool,
            content: r.output,
            ...(r.ok ? {} : { isError: true }),
          }),
        ),
      ],
    })),
  },
});
