import type { ChatMessage, ModelResponse, ToolDefinition } from '@troupe/llm';

/** What providers accept as a tool name (OpenAI and Anthropic alike). */
const MODEL_SAFE = /^[A-Za-z0-9_-]{1,64}$/;

const made = new WeakMap<readonly ToolDefinition[], ModelToolNames>();

/**
 * Troupe names MCP tools `<server>.<tool>`, which model APIs refuse. Towards the model a dot becomes `__`;
 * replies are mapped back through the exact names sent, never by guessing.
 */
export class ModelToolNames {
  readonly #toModel = new Map<string, string>();
  readonly #fromModel = new Map<string, string>();

  /**
   * The names of `tools`, made once per list: a step is given its agent's list, shared by all its steps, so a step
   * waiting on its model keeps no maps of its own.
   */
  static of(tools: readonly ToolDefinition[]): ModelToolNames {
    let names = made.get(tools);
    if (!names) {
      names = new ModelToolNames(tools);
      made.set(tools, names);
    }
    return names;
  }

  constructor(tools: readonly ToolDefinition[]) {
    for (const tool of tools) {
      const safe = MODEL_SAFE.test(tool.name) ? tool.name : tool.name.replaceAll('.', '__').slice(0, 64);
      this.#toModel.set(tool.name, safe);
      this.#fromModel.set(safe, tool.name);
    }
  }

  /** True when every name is already model-safe: nothing to map. */
  get identity(): boolean {
    return [...this.#toModel].every(([name, safe]) => name === safe);
  }

  tools(tools: readonly ToolDefinition[]): ToolDefinition[] {
    return tools.map((tool) => ({ ...tool, name: this.#out(tool.name) }));
  }

  messages(messages: readonly ChatMessage[]): ChatMessage[] {
    return messages.map((message) => {
      if (message.role === 'tool') return { ...message, name: this.#out(message.name) };
      if (message.role === 'assistant' && message.toolCalls) {
        return { ...message, toolCalls: message.toolCalls.map((c) => ({ ...c, name: this.#out(c.name) })) };
      }
      return message;
    });
  }

  response(response: ModelResponse): ModelResponse {
    return {
      ...response,
      toolCalls: response.toolCalls.map((c) => ({ ...c, name: this.#fromModel.get(c.name) ?? c.name })),
    };
  }

  #out(name: string): string {
    return this.#toModel.get(name) ?? name;
  }
}
