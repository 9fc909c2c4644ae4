import { describe, expect, it } from 'vitest';
import { toAnthropicMessages, toAnthropicTools } from '../src/anthropic/anthropicMessages.ts';
import type { ChatMessage } from '../src/types.ts';

/**
 * Every kind of message: two system parts, the task, an assistant turn with text and two tool calls, their
 * results (the first failed), a repair prompt, then a turn of tool calls alone.
 */
const conversation: ChatMessage[] = [
  { role: 'system', content: 'You are a careful coder.' },
  { role: 'user', content: 'Write notes/hello.md.' },
  {
    role: 'assistant',
    content: 'Let me look around first.',
    toolCalls: [
      { id: 'call_1', name: 'read_file', arguments: '{"path":"notes/hello.md"}' },
      { id: 'call_2', name: 'list_dir', arguments: '{"path":"notes","depth":2}' },
    ],
  },
  { role: 'tool', toolCallId: 'call_1', name: 'read_file', content: 'no such file', isError: true },
  { role: 'tool', toolCallId: 'call_2', name: 'list_dir', content: 'todo.md' },
  { role: 'user', content: 'Your reply was not valid JSON. Answer again.' },
  { role: 'system', content: 'Work only inside /srv/task-1.' },
  {
    role: 'assistant',
    content: '',
    toolCalls: [{ id: 'call_3', name: 'write_file', arguments: '{"path": "notes/hello.md", "content": ' }],
  },
];

describe('toAnthropicMessages', () => {
  it('maps a whole conversation to Messages API turns', () => {
    expect(toAnthropicMessages(conversation)).toStrictEqual({
      system: 'You are a careful coder.\n\nWork only inside /srv/task-1.',
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'Write notes/hello.md.' }] },
        {
          role: 'assistant',
          content: [
            { type: 'text', text: 'Let me look around first.' },
            { type: 'tool_use', id: 'call_1', name: 'read_file', input: { path: 'notes/hello.md' } },
            { type: 'tool_use', id: 'call_2', name: 'list_dir', input: { path: 'notes', depth: 2 } },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'call_1', content: 'no such file', is_error: true },
            { type: 'tool_result', tool_use_id: 'call_2', content: 'todo.md' },
            { type: 'text', text: 'Your reply was not valid JSON. Answer again.' },
          ],
        },
        {
          role: 'assistant',
          content: [{ type: 'tool_use', id: 'call_3', name: 'write_file', input: {} }],
        },
      ],
    });
  });

  it('alternates roles, starting with the user', () => {
    const { messages } = toAnthropicMessages(conversation);
    expect(messages.map((m) => m.role)).toEqual(['user', 'assistant', 'user', 'assistant']);
  });

  it('gives no system text when the conversation has none', () => {
    expect(toAnthropicMessages([{ role: 'user', content: 'hi' }]).system).toBe('');
  });

  it('merges consecutive user messages into one turn', () => {
    const { messages } = toAnthropicMessages([
      { role: 'user', content: 'first' },
      { role: 'user', content: 'second' },
    ]);
    expect(messages).toStrictEqual([
      {
        role: 'user',
        content: [
          { type: 'text', text: 'first' },
          { type: 'text', text: 'second' },
        ],
      },
    ]);
  });

  it.each([
    ['malformed JSON', '{"path": '],
    ['an array', '[1, 2]'],
    ['a string', '"notes/hello.md"'],
    ['null', 'null'],
    ['nothing', ''],
  ])('replays arguments that are %s as an empty input object', (_what, args) => {
    const { messages } = toAnthropicMessages([
      { role: 'assistant', content: '', toolCalls: [{ id: 'c', name: 'read_file', arguments: args }] },
    ]);
    expect(messages[0]?.content).toStrictEqual([{ type: 'tool_use', id: 'c', name: 'read_file', input: {} }]);
  });
});

describe('toAnthropicTools', () => {
  it('gives each tool its name, description and an object input schema', () => {
    expect(
      toAnthropicTools([
        {
          name: 'read_file',
          description: 'Read a file of the workspace.',
          parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
        },
        // A schema without `type` still goes out as an object schema, which the API requires.
        { name: 'list_dir', description: 'List a folder.', parameters: { properties: {} } },
      ]),
    ).toStrictEqual([
      {
        name: 'read_file',
        description: 'Read a file of the workspace.',
        input_schema: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
      },
      {
        name: 'list_dir',
        description: 'List a folder.',
        input_schema: { properties: {}, type: 'object' },
      },
    ]);
  });

  it('maps no tools to no tools', () => {
    expect(toAnthropicTools([])).toEqual([]);
  });
});
