import type Anthropic from '@anthropic-ai/sdk';
import type { ChatMessage, ToolDefinition } from '../types.ts';

type Message = Anthropic.Messages.MessageParam;
type Block = Anthropic.Messages.ContentBlockParam;

/**
 * Our conversation in Messages API form: system text apart, tool calls as `tool_use` blocks, results as
 * `tool_result` blocks in a user turn, and consecutive turns of one role merged, as the API requires.
 */
export function toAnthropicMessages(messages: readonly ChatMessage[]): {
  system: string;
  messages: Message[];
} {
  const system = messages
    .filter((m) => m.role === 'system')
    .map((m) => m.content)
    .join('\n\n');
  const turns: Message[] = [];
  for (const message of messages) {
    if (message.role === 'system') continue;
    const role = message.role === 'assistant' ? 'assistant' : 'user';
    // The API refuses empty text blocks and empty turns.
    const blocks = toBlocks(message).filter((b) => b.type !== 'text' || b.text !== '');
    if (blocks.length === 0) continue;
    const last = turns.at(-1);
    if (last && last.role === role && Array.isArray(last.content)) last.content.push(...blocks);
    else turns.push({ role, content: blocks });
  }
  return { system, messages: turns };
}

function toBlocks(message: Exclude<ChatMessage, { role: 'system' }>): Block[] {
  switch (message.role) {
    case 'user':
      return [{ type: 'text', text: message.content }];
    case 'assistant':
      return [
        ...(message.content === '' ? [] : [{ type: 'text' as const, text: message.content }]),
        ...(message.toolCalls ?? []).map((call) => ({
          type: 'tool_use' as const,
          id: call.id,
          name: call.name,
          input: parseInput(call.arguments),
        })),
      ];
    case 'tool':
      return [
        {
          type: 'tool_result',
          tool_use_id: message.toolCallId,
          content: message.content,
          ...(message.isError ? { is_error: true } : {}),
        },
      ];
  }
}

/** The API wants an object; a model's malformed arguments are replayed as an empty one (the tool error says why). */
function parseInput(text: string): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === 'object' && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : {};
  } catch {
    return {};
  }
}

export function toAnthropicTools(tools: readonly ToolDefinition[]): Anthropic.Messages.Tool[] {
  return tools.map((tool) => ({
    name: tool.name,
    description: tool.description,
    input_schema: { ...tool.parameters, type: 'object' } as Anthropic.Messages.Tool.InputSchema,
  }));
}
