import type OpenAI from 'openai';
import type { ChatMessage, ToolDefinition } from '../types.ts';

type Message = OpenAI.Chat.Completions.ChatCompletionMessageParam;
type Tool = OpenAI.Chat.Completions.ChatCompletionTool;

/** Our conversation in Chat Completions form. Tool errors are marked in the text, which the API has no flag for. */
export function toOpenAIMessages(messages: readonly ChatMessage[]): Message[] {
  return messages.map(toOpenAIMessage);
}

function toOpenAIMessage(message: ChatMessage): Message {
  switch (message.role) {
    case 'system':
    case 'user':
      return { role: message.role, content: message.content };
    case 'assistant':
      return {
        role: 'assistant',
        content: message.content === '' && message.toolCalls?.length ? null : message.content,
        ...(message.toolCalls?.length
          ? {
              tool_calls: message.toolCalls.map((call) => ({
                id: call.id,
                type: 'function' as const,
                function: { name: call.name, arguments: call.arguments },
              })),
            }
          : {}),
      };
    case 'tool':
      return {
        role: 'tool',
        tool_call_id: message.toolCallId,
        content: message.isError ? `Error: ${message.content}` : message.content,
      };
  }
}

export function toOpenAITools(tools: readonly ToolDefinition[]): Tool[] {
  return tools.map((tool) => ({
    type: 'function',
    function: { name: tool.name, description: tool.description, parameters: tool.parameters },
  }));
}
