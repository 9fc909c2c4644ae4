import { type Span, SpanKind } from '@opentelemetry/api';
import type { ChatMessage, ToolCall } from '@troupe/llm';
import {
  type AgentStepReply,
  type ApprovalDecision,
  errorMessage,
  type ModelReply,
  type ToolResult,
} from '@troupe/protocol';
import { redactSecrets } from '../logging/secrets.ts';
import { capturesContent, contextOf, endSpan, startChildSpan, tracer } from '../telemetry/tracing.ts';
import type { AgentDefinition } from './agentDefinition.ts';
import type { StepContext } from './stepContext.ts';

/**
 * The spans of an agent step, by the GenAI semantic conventions: `invoke_agent <agent>` for the step's run here,
 * a child of the workflow's span that sent it, and under it `chat <model>` per model call, `execute_tool <tool>` per
 * tool call that runs, and `await_approval <tool>` per call a person decides. Replies and results replayed from the
 * journal make no span: nothing was called.
 */

/** Starts the span of one run of a step, as a child of the span its request's `traceparent` names. */
export function startAgentSpan(agent: AgentDefinition, request: StepContext['request']): Span {
  return tracer().startSpan(
    `invoke_agent ${agent.name}`,
    {
      kind: SpanKind.INTERNAL,
      attributes: {
        'gen_ai.operation.name': 'invoke_agent',
        'gen_ai.provider.name': agent.model.provider,
        'gen_ai.agent.name': agent.name,
        'gen_ai.request.model': agent.model.model,
        'gen_ai.conversation.id': request.taskId,
        'troupe.task.id': request.taskId,
        'troupe.pipeline': request.pipeline,
        'troupe.step': request.step,
        'troupe.step.id': request.stepId,
        'troupe.round': request.round,
      },
    },
    contextOf(request.traceparent),
  );
}

/** Ends a step's span with what its reply says it spent, and its error code when it failed. */
export function endAgentSpan(span: Span, reply: AgentStepReply): void {
  endSpan(span, reply.ok ? undefined : { type: reply.error.code, message: reply.error.message }, {
    'gen_ai.usage.input_tokens': reply.usage.inputTokens,
    'gen_ai.usage.output_tokens': reply.usage.outputTokens,
    'gen_ai.usage.cache_read.input_tokens': reply.usage.cachedTokens,
    'gen_ai.usage.cache_creation.input_tokens': reply.usage.cacheWriteTokens ?? 0,
    'troupe.cost_usd': reply.usage.costUsd,
    'troupe.model_calls': reply.usage.modelCalls,
    'troupe.turns': reply.turns,
  });
}

/** A model call's span; `summary` for the call that condenses older turns. */
export function startModelSpan(
  step: StepContext,
  turn: number,
  messages: readonly ChatMessage[],
  kind: 'turn' | 'summary' = 'turn',
): Span {
  const { agent } = step;
  const span = startChildSpan(step.span, `chat ${agent.model.model}`, SpanKind.CLIENT, {
    'gen_ai.operation.name': 'chat',
    'gen_ai.provider.name': agent.model.provider,
    'gen_ai.request.model': agent.model.model,
    'troupe.turn': turn,
    'troupe.call': kind,
    ...(agent.stream ? { 'gen_ai.request.stream': true } : {}),
    ...(agent.temperature === undefined ? {} : { 'gen_ai.request.temperature': agent.temperature }),
    ...(agent.maxTokens === undefined ? {} : { 'gen_ai.request.max_tokens': agent.maxTokens }),
  });
  if (capturesContent() && span.isRecording()) {
    const system = messages.filter((m) => m.role === 'system');
    if (system.length > 0) {
      span.setAttribute(
        'gen_ai.system_instructions',
        redactSecrets(JSON.stringify(system.map((m) => ({ type: 'text', content: m.content })))),
      );
    }
    span.setAttribute(
      'gen_ai.input.messages',
      redactSecrets(JSON.stringify(messages.filter((m) => m.role !== 'system').map(genAiMessage))),
    );
  }
  return span;
}

/** Ends a model call's span with the reply (model, finish reason, tokens, cost) or the error's code. */
export function endModelSpan(span: Span, outcome: { reply: ModelReply } | { error: unknown }): void {
  if ('error' in outcome) {
    const code = (outcome.error as { code?: unknown } | undefined)?.code;
    endSpan(span, {
      type: typeof code === 'string' ? code : 'model_failed',
      message: errorMessage(outcome.error),
    });
    return;
  }
  const { reply } = outcome;
  if (capturesContent() && span.isRecording()) {
    span.setAttribute(
      'gen_ai.output.messages',
      redactSecrets(
        JSON.stringify([
          {
            ...genAiMessage({ role: 'assistant', content: reply.content, toolCalls: reply.toolCalls }),
            finish_reason: reply.finishReason,
          },
        ]),
      ),
    );
  }
  endSpan(span, undefined, {
    'gen_ai.response.model': reply.model,
    'gen_ai.response.finish_reasons': [reply.finishReason],
    'gen_ai.usage.input_tokens': reply.usage.inputTokens,
    'gen_ai.usage.output_tokens': reply.usage.outputTokens,
    'gen_ai.usage.cache_read.input_tokens': reply.usage.cachedTokens,
    'gen_ai.usage.cache_creation.input_tokens': reply.usage.cacheWriteTokens ?? 0,
    ...(reply.usage.cacheWrite1hTokens
      ? { 'troupe.usage.cache_creation_1h.input_tokens': reply.usage.cacheWrite1hTokens }
      : {}),
    'troupe.cost_usd': reply.costUsd,
    // A fallback answered: the provider that did.
    ...(reply.provider === undefined ? {} : { 'troupe.response.provider': reply.provider }),
  });
}

/** A tool call's span, for a call that runs here (not one replayed from the journal). */
export function startToolSpan(step: StepContext, call: ToolCall, turn: number): Span {
  const span = startChildSpan(step.span, `execute_tool ${call.name}`, SpanKind.INTERNAL, {
    'gen_ai.operation.name': 'execute_tool',
    'gen_ai.tool.name': call.name,
    'gen_ai.tool.call.id': call.id,
    'gen_ai.tool.type': 'function',
    'troupe.turn': turn,
  });
  if (capturesContent() && span.isRecording())
    span.setAttribute('gen_ai.tool.call.arguments', redactSecrets(call.arguments));
  return span;
}

/** Ends a tool call's span with its permission decision, and its error's code when it failed. */
export function endToolSpan(span: Span, result: ToolResult): void {
  if (capturesContent() && span.isRecording())
    span.setAttribute('gen_ai.tool.call.result', redactSecrets(result.output));
  endSpan(
    span,
    result.ok
      ? undefined
      : { type: result.error?.code ?? 'tool_failed', message: result.output.slice(0, 500) },
    { 'troupe.tool.decision': result.decision, 'troupe.tool.truncated': result.truncated !== undefined },
  );
}

/** The span of a person's decision on an `ask` call: how long it took, who decided and what. */
export function startApprovalSpan(step: StepContext, tool: string, callId: string): Span {
  return startChildSpan(step.span, `await_approval ${tool}`, SpanKind.INTERNAL, {
    'gen_ai.tool.name': tool,
    'gen_ai.tool.call.id': callId,
  });
}

export function endApprovalSpan(
  span: Span,
  outcome: { decision: ApprovalDecision } | { error: unknown },
): void {
  if ('error' in outcome) {
    endSpan(span, {
      type: 'approval_failed',
      message: errorMessage(outcome.error),
    });
    return;
  }
  const { decision } = outcome;
  endSpan(span, undefined, {
    'troupe.approval.decision': decision.decision,
    ...(decision.by === undefined ? {} : { 'troupe.approval.by': decision.by }),
  });
}

/** A message in the GenAI conventions' shape: a role and its parts. */
function genAiMessage(message: ChatMessage): { role: string; parts: object[] } {
  switch (message.role) {
    case 'tool':
      return {
        role: 'tool',
        parts: [{ type: 'tool_call_response', id: message.toolCallId, response: message.content }],
      };
    case 'assistant':
      return {
        role: 'assistant',
        parts: [
          ...(message.content === '' ? [] : [{ type: 'text', content: message.content }]),
          ...(message.toolCalls ?? []).map((c) => ({
            type: 'tool_call',
            id: c.id,
            name: c.name,
            arguments: c.arguments,
          })),
        ],
      };
    default:
      return { role: message.role, parts: [{ type: 'text', content: message.content }] };
  }
}
