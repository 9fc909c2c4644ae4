import type { ChatMessage, ModelResponse, ToolDefinition } from '@troupe/llm';
import { describe, expect, it } from 'vitest';
import { ModelToolNames } from '../../src/agent/modelToolNames.ts';

const tool = (name: string): ToolDefinition => ({ name, description: name, parameters: { type: 'object' } });

describe('ModelToolNames', () => {
  it('leaves model-safe names alone', () => {
    const names = new ModelToolNames([tool('read_file'), tool('run-command')]);
    expect(names.identity).toBe(true);
    expect(names.tools([tool('read_file')]).map((t) => t.name)).toEqual(['read_file']);
  });

  it('maps MCP names with a dot out to the model and back from its reply', () => {
    const names = new ModelToolNames([tool('files.read'), tool('read_file')]);
    expect(names.identity).toBe(false);
    expect(names.tools([tool('files.read'), tool('read_file')]).map((t) => t.name)).toEqual([
      'files__read',
      'read_file',
    ]);
    const history: ChatMessage[] = [
      { role: 'assistant', content: '', toolCalls: [{ id: 'c1', name: 'files.read', arguments: '{}' }] },
      { role: 'tool', toolCallId: 'c1', name: 'files.read', content: 'x' },
    ];
    const mapped = names.messages(history);
    expect(mapped[0]?.role === 'assistant' && mapped[0].toolCalls?.[0]?.name).toBe('files__read');
    expect(mapped[1]?.role === 'tool' && mapped[1].name).toBe('files__read');
    const reply: ModelResponse = {
      content: '',
      toolCalls: [
        { id: 'c2', name: 'files__read', arguments: '{}' },
        { id: 'c3', name: 'made__up', arguments: '{}' },
      ],
      usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0 },
      finishReason: 'tool_calls',
      model: 'm',
    };
    // A name the model invented is passed through, so the executor reports it as unknown.
    expect(names.response(reply).toolCalls.map((c) => c.name)).toEqual(['files.read', 'made__up']);
  });

  it('is made once per list of tools, which an agent’s steps share', () => {
    const tools = [tool('files.read')];
    const names = ModelToolNames.of(tools);
    expect(ModelToolNames.of(tools)).toBe(names);
    expect(names.tools(tools).map((t) => t.name)).toEqual(['files__read']);
    expect(ModelToolNames.of([tool('files.read')])).not.toBe(names);
  });
});
