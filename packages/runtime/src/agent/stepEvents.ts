import type { TroupeEvent } from '@troupe/protocol';
import { preview } from '../events/eventFactory.ts';
import type { AgentEmitted } from './agentMachine.ts';
import type { StepContext } from './stepContext.ts';

/** What the agent actor emitted, as the wire event the outside world sees on `troupe.events.>`. */
export function toWireEvent(
  emitted: AgentEmitted,
  { agent, request, scope, deps }: StepContext,
): TroupeEvent {
  const events = deps.events;
  const ref = { agent: agent.name, stepId: request.stepId };
  const model = { provider: agent.model.provider, model: agent.model.model };
  const modelName = `${model.provider}:${model.model}`;
  const toModel = { from: agent.name, to: modelName };
  const fromModel = { from: modelName, to: agent.name };
  switch (emitted.type) {
    case 'llm.request':
      return events.make(
        'llm.request',
        scope,
        { ...ref, turn: emitted.turn, ...model, messages: emitted.messages, tools: emitted.tools },
        toModel,
      );
    case 'llm.response':
      return events.make(
        'llm.response',
        scope,
        {
          ...ref,
          turn: emitted.turn,
          provider: emitted.provider,
          model: emitted.model,
          usage: emitted.usage,
          costUsd: emitted.costUsd,
          finishReason: emitted.finishReason,
          content: preview(emitted.content),
          toolCalls: emitted.toolCalls.map((c) => ({ id: c.id, name: c.name })),
          durationMs: emitted.durationMs,
          ...(emitted.journaled ? { journaled: true } : {}),
        },
        // The model that answered: a fallback, when the primary kept failing.
        { from: `${emitted.provider}:${emitted.model}`, to: agent.name },
      );
    case 'llm.error':
      return events.make(
        'llm.error',
        scope,
        { ...ref, turn: emitted.turn, ...model, code: emitted.code, message: emitted.message },
        fromModel,
      );
    case 'context.compacted': {
      const { type: _type, summary, ...counts } = emitted;
      return events.make(
        'context.compacted',
        scope,
        { ...ref, ...counts, summary: preview(summary) },
        { from: agent.name, to: agent.name },
      );
    }
    case 'tool.call':
      return events.make(
        'tool.call',
        scope,
        {
          ...ref,
          turn: emitted.turn,
          index: emitted.index,
          callId: emitted.callId,
          tool: emitted.tool,
          arguments: preview(emitted.arguments),
        },
        { from: agent.name, to: `tool:${emitted.tool}` },
      );
    case 'tool.result': {
      const { type: _type, output, ...rest } = emitted;
      return events.make(
        'tool.result',
        scope,
        { ...ref, ...rest, output: preview(output) },
        { from: `tool:${emitted.tool}`, to: agent.name },
      );
    }
  }
}
