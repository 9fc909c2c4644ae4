import { describe, expect, it } from 'vitest';
import { anthropicPromptSeen, withoutPromptCache } from '../src/withoutPromptCache.ts';

describe('withoutPromptCache', () => {
  it('takes out every cache marker at any depth and keeps the rest', () => {
    const body = {
      model: 'gpt-5-mini',
      prompt_cache_key: 'troupe:demo:coder',
      prompt_cache_retention: '24h',
      tools: [{ name: 'read_file', cache_control: { type: 'ephemeral' } }],
      messages: [
        {
          role: 'user',
          content: [{ type: 'text', text: 'hi', cache_control: { type: 'ephemeral', ttl: '1h' } }],
        },
      ],
    };
    expect(withoutPromptCache(body)).toEqual({
      model: 'gpt-5-mini',
      tools: [{ name: 'read_file' }],
      messages: [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }],
    });
  });
});

describe('anthropicPromptSeen', () => {
  it('reads a cached body as the uncached one: system blocks as their text, string contents as blocks', () => {
    const cached = {
      system: [{ type: 'text', text: 'Be brief.', cache_control: { type: 'ephemeral' } }],
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'hi', cache_control: { type: 'ephemeral' } }] },
      ],
    };
    const uncached = { system: 'Be brief.', messages: [{ role: 'user', content: 'hi' }] };
    expect(anthropicPromptSeen(cached)).toEqual(anthropicPromptSeen(uncached));
    expect(anthropicPromptSeen(cached)).toEqual({
      system: 'Be brief.',
      messages: [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }],
    });
    expect(anthropicPromptSeen({ messages: [] })).not.toHaveProperty('system');
  });
});
