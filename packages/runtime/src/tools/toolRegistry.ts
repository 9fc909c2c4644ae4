import type { JsonSchema, ToolDefinition } from '@troupe/llm';
import { errorMessage } from '@troupe/protocol';
import { z } from 'zod';
import type { Tool } from './tool.ts';
import { ToolError } from './toolError.ts';

// The strictest rule among the providers we target (OpenAI's function names).
const validName = /^[a-zA-Z0-9_-]{1,64}$/;
// An MCP server's tool, `<server>.<tool>`; model providers map the dot away before a model sees the name.
const validMcpName = /^[a-z0-9-]+\.[A-Za-z0-9_-]{1,64}$/;

interface Entry {
  tool: Tool;
  parameters: JsonSchema;
}

/**
 * The tools a runtime knows, by name, with the JSON Schema the model sees for each.
 *
 * @example
 * const registry = new ToolRegistry().register(readFileTool).register(writeFileTool);
 * const tools = registry.definitions(['read_file']);
 */
export class ToolRegistry {
  readonly #entries = new Map<string, Entry>();

  /**
   * Adds a tool; throws `ToolError` (`invalid_tool`) on a taken or malformed name or a non-object schema. A name is
   * letters, digits, `_` and `-`, or `<server>.<tool>` for a tool of an MCP server.
   */
  register(tool: Tool): this {
    if (!validName.test(tool.name) && !validMcpName.test(tool.name)) {
      throw new ToolError(
        'invalid_tool',
        `tool name "${tool.name}" must match ${validName.source}, or ${validMcpName.source} for an MCP server's tool`,
      );
    }
    if (this.#entries.has(tool.name)) {
      throw new ToolError('invalid_tool', `tool ${tool.name} is already registered`);
    }
    this.#entries.set(tool.name, { tool, parameters: parametersOf(tool) });
    return this;
  }

  get(name: string): Tool | undefined {
    return this.#entries.get(name)?.tool;
  }

  has(name: string): boolean {
    return this.#entries.has(name);
  }

  /** Registered names, in registration order. */
  names(): string[] {
    return [...this.#entries.keys()];
  }

  /** What the model is shown for the named tools; throws `ToolError` (`unknown_tool`) for a name not registered. */
  definitions(names: readonly string[]): ToolDefinition[] {
    return names.map((name) => {
      const entry = this.#entries.get(name);
      if (!entry) {
        const known = this.names().join(', ') || 'none';
        throw new ToolError('unknown_tool', `tool ${name} is not registered; registered tools: ${known}`);
      }
      const { tool, parameters } = entry;
      return { name, description: tool.description, parameters: structuredClone(parameters) };
    });
  }
}

function parametersOf(tool: Tool): JsonSchema {
  const schema = toJsonSchema(tool);
  const { $schema: _, ...parameters } = schema;
  if (parameters.type !== 'object') {
    throw new ToolError('invalid_tool', `tool ${tool.name}: its input must be an object schema (z.object)`);
  }
  return parameters;
}

function toJsonSchema(tool: Tool): JsonSchema {
  try {
    // `input` io: the model writes arguments before defaults and transforms apply.
    return z.toJSONSchema(tool.input, { target: 'draft-07', io: 'input' });
  } catch (cause) {
    const reason = errorMessage(cause);
    throw new ToolError(
      'invalid_tool',
      `tool ${tool.name}: its input schema has no JSON Schema form (${reason})`,
      {
        cause,
      },
    );
  }
}
