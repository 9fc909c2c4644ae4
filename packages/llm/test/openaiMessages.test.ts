import { describe, expect, it } from 'vitest';
import { toOpenAIMessages, toOpenAITools } from '../src/openai/openaiMessages.ts';
import type { ChatMessage, ToolDefinition } from '../src/types.ts';

/**
 * Every kind of message: two system parts, the task, an assistant turn with text and two tool calls, their
 * results (the first failed), a repair prompt, then a turn of tool calls alone.
 */
const conversation: ChatMessage[] = [
  { role: 'system', content: 'You are a careful coder.' },
  { role: 'system', content: 'Work only inside /srv/task-1.' },
  { role: 'user', content: 'Write notes/hello.md.' },
  {
    role: 'assistant',
    content: 'Let me look around first.',
    toolCalls: [
      { id: 'call_1', name: 'read_file', arguments: '{"path":"notes/hello.md"}' },
      { id: 'call_2', name: 'list_dir', arguments: '{"path":"notes"}' },
    ],
  },
  { role: 'tool', toolCallId: 'call_1', name: 'read_file', content: 'no such file', isError: true },
  { role: 'tool', toolCallId: 'call_2', name: 'list_dir', content: 'todo.md' },
  { role: 'user', content: 'Your reply was not valid JSON. Answer again.' },
  {
    role: 'assistant',
    content: '',
    toolCalls: [{ id: 'call_3', name: 'write_file', arguments: '{"path": "notes/hello.md", "content": ' }],
  },
];

describe('toOpenAIMessages', () => {
  it('maps a whole conversation to Chat Completions messages, one for one', () => {
    expect(toOpenAIMessages(conversation)).toStrictEqual([
      { role: 'system', content: 'You are a careful coder.' },
      { role: 'system', content: 'Work only inside /srv/task-1.' },
      { role: 'user', content: 'Write notes/hello.md.' },
      {
        role: 'assistant',
        content: 'Let me look around first.',
        tool_calls: [
          {
            id: 'call_1',
            type: 'function',
            function: { name: 'read_file', arguments: '{"path":"notes/hello.md"}' },
          },
          { id: 'call_2', type: 'function', function: { name: 'list_dir', arguments: '{"path":"notes"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_1', content: 'Error: no such file' },
      { role: 'tool', tool_call_id: 'call_2', content: 'todo.md' },
      { role: 'user', content: 'Your reply was not valid JSON. Answer again.' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          {
            id: 'call_3',
            type: 'function',
            // Malformed arguments are replayed as the model wrote them.
            function: { name: 'write_file', arguments: '{"path": "notes/hello.md", "content": ' },
          },
        ],
      },
    ]);
  });

  it('keeps empty text, without tool_calls, on an assistant turn that called no tool', () => {
    expect(toOpenAIMessages([{ role: 'assistant', content: '' }])).toStrictEqual([
      { role: 'assistant', content: '' },
    ]);
    expect(toOpenAIMessages([{ role: 'assistant', content: 'done', toolCalls: [] }])).toStrictEqual([
      { role: 'assistant', content: 'done' },
    ]);
  });

  it('marks only failed tool results with Error:', () => {
    const [failed, fine] = toOpenAIMessages([
      { role: 'tool', toolCallId: 'a', name: 't', content: 'denied', isError: true },
      { role: 'tool', toolCallId: 'b', name: 't', content: 'Error: is just text here', isError: false },
    ]);
    expect(failed).toMatchObject({ content: 'Error: denied' });
    expect(fine).toMatchObject({ content: 'Error: is just text here' });
  });

  it('maps nothing to nothing', () => {
    expect(toOpenAIMessages([])).toEqual([]);
  });
});

describe('toOpenAITools', () => {
  it('wraps each tool as a function with its name, description and parameter schema', () => {
    const tools: ToolDefinition[] = [
      {
        name: 'read_file',
        description: 'Read a file of the workspace.',
        parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
      },
      { name: 'list_dir', description: 'List a folder.', parameters: { type: 'object', properties: {} } },
    ];
    expect(toOpenAITools(tools)).toStrictEqual([
      {
        type: 'function',
        function: {
          name: 'read_file',
          description: 'Read a file of the workspace.',
          parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
        },
      },
      {
        type: 'function',
        function: {
          name: 'list_dir',
          description: 'List a folder.',
          parameters: { type: 'object', properties: {} },
        },
      },
    ]);
  });
});
