import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool } from '../../src/tools/tool.ts';
import { ToolError } from '../../src/tools/toolError.ts';
import { ToolRegistry } from '../../src/tools/toolRegistry.ts';

const echo = defineTool({
  name: 'echo',
  description: 'Repeat the text back',
  input: z.object({
    text: z.string().describe('What to repeat'),
    times: z.number().int().default(1),
  }),
  run: async ({ text, times }) => text.repeat(times),
});

const noop = defineTool({
  name: 'noop',
  description: 'Do nothing',
  input: z.object({}),
  run: async () => '',
});

function codeOf(action: () => unknown): string | undefined {
  try {
    action();
  } catch (error) {
    return error instanceof ToolError ? error.code : `not a ToolError: ${String(error)}`;
  }
  return undefined;
}

describe('ToolRegistry', () => {
  it('finds registered tools by name and lists names in registration order', () => {
    const registry = new ToolRegistry().register(noop).register(echo);
    expect(registry.get('echo')).toBe(echo);
    expect(registry.get('missing')).toBeUndefined();
    expect(registry.has('noop')).toBe(true);
    expect(registry.has('missing')).toBe(false);
    expect(registry.names()).toEqual(['noop', 'echo']);
  });

  it('refuses a second tool with a taken name', () => {
    const registry = new ToolRegistry().register(echo);
    expect(() => registry.register({ ...noop, name: 'echo' })).toThrow('tool echo is already registered');
    expect(codeOf(() => registry.register(echo))).toBe('invalid_tool');
  });

  it('refuses a name a model provider would reject', () => {
    expect(codeOf(() => new ToolRegistry().register({ ...noop, name: 'read file' }))).toBe('invalid_tool');
    expect(codeOf(() => new ToolRegistry().register({ ...noop, name: 'x'.repeat(65) }))).toBe('invalid_tool');
  });

  it('accepts an MCP tool name, <server>.<tool>, with exactly one dot', () => {
    const registry = new ToolRegistry()
      .register({ ...noop, name: 'files.read_file' })
      .register({ ...noop, name: 'git-hub.Create-Issue' })
      .register({ ...noop, name: `srv.${'x'.repeat(64)}` });
    expect(registry.names()).toEqual(['files.read_file', 'git-hub.Create-Issue', `srv.${'x'.repeat(64)}`]);
    expect(registry.definitions(['files.read_file'])[0]?.name).toBe('files.read_file');
  });

  it('refuses dotted names that are not <server>.<tool>', () => {
    const refused = [
      'a.b.c',
      '.tool',
      'srv.',
      'Srv.tool',
      'my_srv.tool',
      'srv.read file',
      'srv.read/file',
      `srv.${'x'.repeat(65)}`,
    ];
    for (const name of refused) {
      expect(
        codeOf(() => new ToolRegistry().register({ ...noop, name })),
        name,
      ).toBe('invalid_tool');
    }
    expect(() => new ToolRegistry().register({ ...noop, name: 'a.b.c' })).toThrow(
      /tool name "a\.b\.c" must match .* for an MCP server's tool/,
    );
  });

  it('refuses a tool whose input is not an object schema', () => {
    const bare = { ...noop, input: z.string() };
    expect(() => new ToolRegistry().register(bare)).toThrow('tool noop: its input must be an object schema');
  });

  it('refuses a tool whose input has no JSON Schema form', () => {
    const dated = { ...noop, input: z.object({ when: z.date() }) };
    expect(codeOf(() => new ToolRegistry().register(dated))).toBe('invalid_tool');
  });

  it('gives the model a draft-07 object schema without $schema, defaults optional', () => {
    const [definition] = new ToolRegistry().register(echo).definitions(['echo']);
    expect(definition).toEqual({
      name: 'echo',
      description: 'Repeat the text back',
      parameters: {
        type: 'object',
        properties: {
          text: { type: 'string', description: 'What to repeat' },
          times: {
            type: 'integer',
            default: 1,
            minimum: Number.MIN_SAFE_INTEGER,
            maximum: Number.MAX_SAFE_INTEGER,
          },
        },
        required: ['text'],
      },
    });
  });

  it('returns definitions in the order asked, as independent copies', () => {
    const registry = new ToolRegistry().register(echo).register(noop);
    const first = registry.definitions(['noop', 'echo']);
    expect(first.map((d) => d.name)).toEqual(['noop', 'echo']);
    for (const definition of first) definition.parameters.type = 'tampered';
    expect(registry.definitions(['noop'])[0]?.parameters.type).toBe('object');
  });

  it('refuses definitions for a tool that is not registered, naming the registered ones', () => {
    const registry = new ToolRegistry().register(echo);
    expect(() => registry.definitions(['echo', 'fly'])).toThrow(
      'tool fly is not registered; registered tools: echo',
    );
    expect(codeOf(() => registry.definitions(['fly']))).toBe('unknown_tool');
  });
});

describe('ToolError', () => {
  it('carries a stable code, its name and the cause', () => {
    const cause = new Error('EACCES');
    const error = new ToolError('failed', 'read_file failed: EACCES', { cause });
    expect(error).toBeInstanceOf(Error);
    expect(error.name).toBe('ToolError');
    expect(error.code).toBe('failed');
    expect(error.message).toBe('read_file failed: EACCES');
    expect(error.cause).toBe(cause);
  });
});
