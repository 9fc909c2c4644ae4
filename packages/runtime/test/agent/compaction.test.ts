import type { ChatMessage } from '@troupe/llm';
import { describe, expect, it } from 'vitest';
import { compacted, estimateTokens, olderTurns } from '../../src/agent/compaction.ts';

const call = (id: string): ChatMessage => ({
  role: 'assistant',
  content: '',
  toolCalls: [{ id, name: 't', arguments: '{}' }],
});
const result = (id: string): ChatMessage => ({ role: 'tool', toolCallId: id, name: 't', content: `r${id}` });
const opening: ChatMessage[] = [
  { role: 'system', content: 'sys' },
  { role: 'user', content: 'task' },
];

describe('compaction helpers', () => {
  it('summarizes nothing while the conversation is short', () => {
    expect(olderTurns([...opening, call('1'), result('1')])).toEqual([]);
  });

  it('keeps the opening and a recent tail, never starting the tail at a tool result', () => {
    // 2 + 7 messages: a plain cut would start the tail at a tool result; it moves past it instead.
    const messages = [
      ...opening,
      call('1'),
      result('1'),
      call('2'),
      result('2'),
      call('3'),
      result('3'),
      call('4'),
    ];
    const older = olderTurns(messages);
    expect(older).toEqual([call('1'), result('1')]);
    const after = compacted(messages, 'S');
    expect(after.slice(0, 2)).toEqual(opening);
    expect(after[2]).toMatchObject({ role: 'user', content: expect.stringContaining('S') });
    expect(after[3]).toEqual(call('2'));
    expect(after).toHaveLength(2 + 1 + 5);
  });

  it('estimates about four characters a token, counting tool call arguments', () => {
    expect(estimateTokens([{ role: 'user', content: 'x'.repeat(40) }])).toBe(10);
    const withCall: ChatMessage = {
      role: 'assistant',
      content: '',
      toolCalls: [{ id: 'a', name: 'abcd', arguments: 'x'.repeat(36) }],
    };
    expect(estimateTokens([withCall])).toBe(10);
  });
});
