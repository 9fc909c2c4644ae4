import {
  anthropicPromptSeen,
  type FakeModelServer,
  type FakeReply,
  startFakeAnthropic,
} from '@troupe/testkit';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AnthropicProvider, type AnthropicProviderOptions } from '../src/anthropic/anthropicProvider.ts';
import type { ChatMessage, ModelRequest, ToolCall, ToolDefinition } from '../src/types.ts';

let fake: FakeModelServer;

beforeEach(async () => {
  fake = await startFakeAnthropic();
});

afterEach(async () => {
  await fake.stop();
});

const provider = (options: Partial<AnthropicProviderOptions> = {}) =>
  new AnthropicProvider({ model: 'claude-test', apiKey: 'sk-ant-test', baseURL: fake.baseURL, ...options });

const tool = (name: string): ToolDefinition => ({
  name,
  description: `The ${name} tool.`,
  parameters: { type: 'object', properties: { path: { type: 'string' } } },
});

const tools = [tool('list_dir'), tool('read_file'), tool('write_file')];

const SYSTEM = 'You are a careful coder. Follow the repository conventions.';

const request = (messages: ChatMessage[], extra: Partial<ModelRequest> = {}): ModelRequest => ({
  messages: [{ role: 'system', content: SYSTEM }, ...messages],
  tools,
  context: { taskId: 't1', pipeline: 'demo', agent: 'coder', stepId: 't1.code.1' },
  ...extra,
});

/** An assistant turn calling `count` tools, and the user turn with their results. */
function toolRound(round: number, count: number): ChatMessage[] {
  const calls: ToolCall[] = Array.from({ length: count }, (_, i) => ({
    id: `toolu_${round}_${i}`,
    name: 'read_file',
    arguments: JSON.stringify({ path: `src/file${i}.ts` }),
  }));
  return [
    { role: 'assistant', content: `Round ${round}: reading.`, toolCalls: calls },
    ...calls.map((call) => ({
      role: 'tool' as const,
      toolCallId: call.id,
      name: call.name,
      content: `contents of ${call.id}`,
    })),
  ];
}

const ok: FakeReply = { kind: 'message', content: 'ok' };

// biome-ignore lint/suspicious/noExplicitAny: request bodies are the JSON the SDK sent.
type Body = any;

/**
 * Every breakpoint of a body in the API's prefix order (tools, system, messages), with where it is and its lifetime
 * as the API takes it (a marker without `ttl` is 5 minutes).
 */
function breakpoints(body: Body): { at: string; ttl: string }[] {
  const found: { at: string; ttl: string }[] = [];
  const visit = (at: string, block: Body) => {
    if (block?.cache_control) {
      expect(block.cache_control.type).toBe('ephemeral');
      found.push({ at, ttl: block.cache_control.ttl ?? '5m' });
    }
  };
  for (const [i, t] of (body.tools ?? []).entries()) visit(`tools[${i}]`, t);
  if (Array.isArray(body.system)) for (const [i, b] of body.system.entries()) visit(`system[${i}]`, b);
  for (const [i, m] of body.messages.entries()) {
    if (!Array.isArray(m.content)) continue;
    for (const [j, b] of m.content.entries()) visit(`messages[${i}][${j}]`, b);
  }
  return found;
}

describe('AnthropicProvider cache breakpoints', () => {
  it('marks the last tool, the system prompt and the last block of the conversation, 5 minutes by default', async () => {
    fake.enqueue(ok);
    const messages: ChatMessage[] = [{ role: 'user', content: 'Write notes/hello.md.' }, ...toolRound(1, 2)];
    await provider().complete(request(messages));
    const body = fake.requests[0]?.body;

    // 5 minutes is the bare marker, which proxies that predate `ttl` take too.
    const marker = { type: 'ephemeral' };
    expect(body.tools.map((t: Body) => t.cache_control)).toEqual([undefined, undefined, marker]);
    // The system is sent as one text block, so it can carry a marker; its text is unchanged.
    expect(body.system).toEqual([{ type: 'text', text: SYSTEM, cache_control: marker }]);
    const last = body.messages.at(-1);
    expect(last.content.at(-1)).toMatchObject({ type: 'tool_result', cache_control: marker });
    expect(breakpoints(body).map((b) => b.at)).toEqual([
      'tools[2]',
      'system[0]',
      `messages[${body.messages.length - 1}][${last.content.length - 1}]`,
    ]);
  });

  it('marks the last tool and the conversation when there is no system prompt', async () => {
    fake.enqueue(ok);
    await provider().complete({
      ...request([{ role: 'user', content: 'hi' }]),
      messages: [{ role: 'user', content: 'hi' }],
    });
    const noSystem = fake.requests[0]?.body;
    expect(noSystem).not.toHaveProperty('system');
    expect(breakpoints(noSystem).map((b) => b.at)).toEqual(['tools[2]', 'messages[0][0]']);
  });

  it('marks only the prefix tasks share for an agent without tools, whose one call a step no later call reads', async () => {
    const review = { name: 'review', schema: { type: 'object', properties: {} } };
    const conversation = [{ role: 'user' as const, content: 'Review notes/hello.md.' }];
    fake.enqueue(ok, { kind: 'message', toolCalls: [{ name: 'review', arguments: '{}' }] });
    fake.enqueue({ kind: 'message', toolCalls: [{ name: 'review', arguments: '{}' }] }, ok);
    await provider().complete(request(conversation, { tools: [] }));
    await provider().complete(request(conversation, { tools: [], responseSchema: review }));
    await provider().complete({
      ...request(conversation, { tools: [], responseSchema: review }),
      messages: conversation,
    });
    await provider().complete({ ...request(conversation, { tools: [] }), messages: conversation });
    const [plain, structured, structuredNoSystem, bare] = fake.requests.map((r) => r.body);
    expect(plain).not.toHaveProperty('tools');
    expect(breakpoints(plain).map((b) => b.at)).toEqual(['system[0]']);
    // The answer tool comes before the system in the prefix: the system's breakpoint covers it.
    expect(breakpoints(structured).map((b) => b.at)).toEqual(['system[0]']);
    expect(breakpoints(structuredNoSystem).map((b) => b.at)).toEqual(['tools[0]']);
    expect(breakpoints(bare)).toEqual([]);
  });

  it('marks the answer tool of a structured reply, the last of the tools sent', async () => {
    fake.enqueue({ kind: 'message', toolCalls: [{ name: 'review', arguments: '{"verdict":"ok"}' }] });
    await provider().complete(
      request([{ role: 'user', content: 'Review it.' }], {
        responseSchema: { name: 'review', schema: { type: 'object', properties: {} } },
      }),
    );
    const body = fake.requests[0]?.body;
    expect(body.tools.at(-1)).toMatchObject({ name: 'review', cache_control: { type: 'ephemeral' } });
    expect(breakpoints(body)).toHaveLength(3);
  });

  it('marks where the previous call ended too when the last turn added more blocks than the lookback reaches', async () => {
    fake.enqueue(ok, ok);
    const start: ChatMessage[] = [{ role: 'user', content: 'Read the whole module.' }, ...toolRound(1, 1)];
    // One round of 12 parallel tool calls: 13 assistant blocks and 12 results after the previous call's end.
    const long = [...start, ...toolRound(2, 12)];
    await provider().complete(request(long));
    // A short round stays within the lookback: one breakpoint at the end is enough.
    await provider().complete(request([...start, ...toolRound(2, 2)]));
    const [wide, narrow] = fake.requests.map((r) => r.body);

    // Messages: user, assistant(1), user(result 1), assistant(12 calls), user(12 results).
    expect(wide.messages).toHaveLength(5);
    expect(breakpoints(wide).map((b) => b.at)).toEqual([
      'tools[2]',
      'system[0]',
      'messages[2][0]',
      'messages[4][11]',
    ]);
    expect(breakpoints(narrow).map((b) => b.at)).toEqual(['tools[2]', 'system[0]', 'messages[4][1]']);
  });

  it('never sends more than 4 breakpoints, whatever the conversation', async () => {
    const conversations: ChatMessage[][] = [];
    let messages: ChatMessage[] = [{ role: 'user', content: 'Go.' }];
    for (let round = 1; round <= 6; round++) {
      messages = [...messages, ...toolRound(round, round * 5)];
      conversations.push(messages);
      conversations.push([
        ...messages,
        { role: 'assistant', content: 'Done.' },
        { role: 'user', content: 'More.' },
      ]);
    }
    fake.enqueue(...conversations.map(() => ok));
    for (const conversation of conversations) await provider().complete(request(conversation));
    const counts = fake.requests.map((r) => breakpoints(r.body).length);
    expect(counts).toHaveLength(conversations.length);
    expect(Math.max(...counts)).toBe(4);
    for (const count of counts) expect(count).toBeLessThanOrEqual(4);
  });
});

describe('AnthropicProvider cache lifetime', () => {
  const conversation: ChatMessage[] = [
    { role: 'user', content: 'Go.' },
    ...toolRound(1, 1),
    ...toolRound(2, 20),
  ];

  it.each([
    ['auto, no hint: 5 minutes', 'auto', undefined, '5m'],
    ['auto, the request hints an hour: 1 hour', 'auto', '1h', '1h'],
    ['auto, the request hints 5 minutes: 5 minutes', 'auto', '5m', '5m'],
    ['an hour in config, no hint: 1 hour', { ttl: '1h' }, undefined, '1h'],
    ['an hour in config wins over a 5-minute hint', { ttl: '1h' }, '5m', '1h'],
    ['5 minutes in config wins over an hour hinted', { ttl: '5m' }, '1h', '5m'],
  ] as const)('%s', async (_what, cache, hint, expected) => {
    fake.enqueue(ok);
    await provider({ cache }).complete(
      request(conversation, hint === undefined ? {} : { cache: { ttl: hint } }),
    );
    const body = fake.requests[0]?.body;
    const found = breakpoints(body);
    expect(found).toHaveLength(4);
    expect(found.map((b) => b.ttl)).toEqual([expected, expected, expected, expected]);
    // Only the hour is named; 5 minutes is the bare marker.
    expect(JSON.stringify(body).includes('"ttl":"1h"')).toBe(expected === '1h');
    expect(JSON.stringify(body)).not.toContain('"ttl":"5m"');
  });

  it('never puts a 1-hour breakpoint after a 5-minute one (the API refuses that order)', async () => {
    const settings = ['auto', { ttl: '1h' }, { ttl: '5m' }] as const;
    const hints = [undefined, '5m', '1h'] as const;
    for (const cache of settings) {
      for (const hint of hints) {
        fake.enqueue(ok);
        await provider({ cache }).complete(
          request(conversation, hint === undefined ? {} : { cache: { ttl: hint } }),
        );
      }
    }
    expect(fake.requests).toHaveLength(settings.length * hints.length);
    for (const { body } of fake.requests) {
      const ttls = breakpoints(body).map((b) => b.ttl);
      expect(ttls.length).toBeGreaterThan(0);
      const firstShort = ttls.indexOf('5m');
      if (firstShort !== -1) expect(ttls.slice(firstShort)).not.toContain('1h');
    }
  });
});

describe('AnthropicProvider cache: off', () => {
  const conversation: ChatMessage[] = [
    { role: 'user', content: 'Write notes/hello.md.' },
    ...toolRound(1, 1),
    ...toolRound(2, 20),
  ];

  it('sends the body of a provider without caching, and auto differs from it only by the markers', async () => {
    fake.enqueue(ok, ok, ok);
    await provider({ cache: 'off' }).complete(request(conversation, { cache: { ttl: '1h' } }));
    await provider().complete(request(conversation, { cache: { ttl: '1h' } }));
    await provider({ cache: { ttl: '1h' } }).complete(request(conversation));
    const [off, auto, hour] = fake.requests.map((r) => r.body);

    expect(breakpoints(off)).toEqual([]);
    expect(off.system).toBe(SYSTEM);
    expect(JSON.stringify(off)).not.toContain('cache_control');
    expect(off.tools).toEqual(
      tools.map((t) => ({ name: t.name, description: t.description, input_schema: t.parameters })),
    );
    expect(off.messages[0]).toEqual({
      role: 'user',
      content: [{ type: 'text', text: 'Write notes/hello.md.' }],
    });

    // What the model sees is the same: the markers (and the system's block form) are all that caching adds.
    expect(breakpoints(auto)).toHaveLength(4);
    expect(breakpoints(hour)).toHaveLength(4);
    expect(anthropicPromptSeen(auto)).toEqual(off);
    expect(anthropicPromptSeen(hour)).toEqual(off);
  });
});

describe('AnthropicProvider cache usage', () => {
  const usage = {
    inputTokens: 120,
    outputTokens: 30,
    cachedTokens: 4_000,
    cacheWriteTokens: 900,
    cacheWrite1hTokens: 600,
  };

  // Streamed, the fake sends the input counts in message_start and again, cumulative, in message_delta (the 1-hour
  // split only in message_start), as the API does: they must be taken once, and the split kept.
  it.each([
    ['plain', false],
    ['streamed', true],
  ])(
    'counts reads and writes into the input, writes and their 1-hour part apart (%s)',
    async (_what, stream) => {
      fake.enqueue({ kind: 'message', content: 'ok', usage });
      const response = await provider().complete(request([{ role: 'user', content: 'hi' }], { stream }));
      expect(response.usage).toEqual({
        // input_tokens (after the last cache point) + reads + writes: the whole prompt.
        inputTokens: 120 + 4_000 + 900,
        outputTokens: 30,
        cachedTokens: 4_000,
        cacheWriteTokens: 900,
        cacheWrite1hTokens: 600,
      });
    },
  );

  it.each([
    ['plain', false],
    ['streamed', true],
  ])('reports 5-minute writes with no 1-hour part (%s)', async (_what, stream) => {
    fake.enqueue({ kind: 'message', content: 'ok', usage: { ...usage, cacheWrite1hTokens: 0 } });
    const response = await provider().complete(request([{ role: 'user', content: 'hi' }], { stream }));
    expect(response.usage.cacheWriteTokens).toBe(900);
    expect(response.usage.cacheWrite1hTokens).toBeUndefined();
    expect(response.usage.inputTokens).toBe(5_020);
  });
});

describe('AnthropicProvider cache, as the fake server accounts it', () => {
  const instructions = 'Follow the repository conventions and keep every change small. '.repeat(120);
  const loop = (messages: ChatMessage[]): ModelRequest => ({
    ...request(messages),
    messages: [{ role: 'system', content: instructions }, ...messages],
  });

  it('reads the prompt of the call before from the second call of a step on, and the tools and system in the next task', async () => {
    let conversation: ChatMessage[] = [{ role: 'user', content: 'Write notes/hello.md.' }];
    const usages = [];
    for (let round = 1; round <= 4; round++) {
      fake.enqueue(ok);
      usages.push((await provider().complete(loop(conversation))).usage);
      conversation = [...conversation, ...toolRound(round, 2)];
    }
    expect(usages[0]?.cachedTokens).toBe(0);
    expect(usages[0]?.cacheWriteTokens).toBeGreaterThan(0.9 * (usages[0]?.inputTokens ?? 0));
    for (const usage of usages.slice(1)) {
      expect(usage.cachedTokens / usage.inputTokens).toBeGreaterThanOrEqual(0.8);
      expect(usage.cacheWriteTokens).toBeGreaterThan(0);
    }

    fake.enqueue(ok);
    const nextTask = await provider().complete(loop([{ role: 'user', content: 'Write notes/bye.md.' }]));
    expect(nextTask.usage.cachedTokens / nextTask.usage.inputTokens).toBeGreaterThanOrEqual(0.8);
  });

  it('still reads the call before after a turn of more blocks than the lookback reaches', async () => {
    const start: ChatMessage[] = [{ role: 'user', content: 'Read the whole module.' }, ...toolRound(1, 1)];
    fake.enqueue(ok, ok);
    const before = await provider().complete(loop(start));
    const after = await provider().complete(loop([...start, ...toolRound(2, 12)]));
    // The whole prompt of the call before, as it wrote it, is read.
    expect(before.usage.cacheWriteTokens).toBeGreaterThan(0);
    expect(after.usage.cachedTokens).toBe(before.usage.cacheWriteTokens);
  });

  it('reports the writes of the 1-hour lifetime apart', async () => {
    fake.enqueue(ok);
    const response = await provider({ cache: { ttl: '1h' } }).complete(
      loop([{ role: 'user', content: 'Go.' }]),
    );
    expect(response.usage.cacheWriteTokens).toBeGreaterThan(1_000);
    expect(response.usage.cacheWrite1hTokens).toBe(response.usage.cacheWriteTokens);
  });
});
