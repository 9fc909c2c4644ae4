import OpenAI from 'openai';
import type {
  ChatCompletionCreateParamsNonStreaming,
  ChatCompletionMessageParam,
} from 'openai/resources/chat/completions';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type FakeModelServer, SimulatedClock, startFakeOpenAI } from '../src/index.ts';

const MODEL = 'gpt-test-model';
const MINUTE = 60_000;
/** About 1,500 tokens of instructions at the fake's 4 characters a token. */
const INSTRUCTIONS = 'Follow the house style in every answer. '.repeat(150);
const instructions: ChatCompletionMessageParam = { role: 'system', content: INSTRUCTIONS };

let fake: FakeModelServer;
let client: OpenAI;
let clock: SimulatedClock;

async function restart(options: Parameters<typeof startFakeOpenAI>[0] = {}): Promise<void> {
  await fake?.stop();
  clock = new SimulatedClock();
  fake = await startFakeOpenAI({ now: () => clock.now(), ...options });
  client = new OpenAI({ apiKey: 'test', baseURL: fake.baseURL, maxRetries: 0 });
}

beforeEach(async () => {
  await restart();
});

afterEach(async () => {
  await fake.stop();
});

async function usageOf(params: Omit<ChatCompletionCreateParamsNonStreaming, 'model'>) {
  fake.enqueue({ kind: 'message', content: 'ok' });
  const completion = await client.chat.completions.create({ model: MODEL, ...params });
  if (!completion.usage) throw new Error('no usage');
  return completion.usage;
}

const cachedOf = (usage: OpenAI.CompletionUsage) => usage.prompt_tokens_details?.cached_tokens;

describe('the fake OpenAI prompt cache', () => {
  it('caches nothing under 1,024 tokens: usage is the estimate of before', async () => {
    const params = { messages: [{ role: 'user' as const, content: 'Summarise notes.md' }] };

    await usageOf(params);
    const second = await usageOf(params);

    expect(second.prompt_tokens).toBe(Math.ceil(JSON.stringify(fake.requests[1]?.body).length / 4));
    expect(cachedOf(second)).toBe(0);
  });

  it('reads a repeated prefix of 1,024 tokens or more, in 128-token steps; prompt_tokens stays whole', async () => {
    const first = await usageOf({
      messages: [instructions, { role: 'user', content: 'Summarise notes.md' }],
    });
    const second = await usageOf({
      messages: [instructions, { role: 'user', content: 'Summarise taxes.md' }],
    });

    const cached = cachedOf(second) ?? 0;
    expect(cachedOf(first)).toBe(0);
    expect(second.prompt_tokens).toBe(first.prompt_tokens);
    expect(cached).toBeGreaterThanOrEqual(1024);
    expect((cached - 1024) % 128).toBe(0);
    // The shared part is the instructions (and the first characters of the question), about 1,500 tokens.
    const shared = Math.ceil(INSTRUCTIONS.length / 4);
    expect(cached).toBeLessThanOrEqual(shared + 10);
    expect(cached).toBeGreaterThan(shared - 128 - 10);
  });

  it('reads the whole previous turn as a conversation grows', async () => {
    const turn1: ChatCompletionMessageParam[] = [instructions, { role: 'user', content: 'Read notes.md' }];
    const turn2: ChatCompletionMessageParam[] = [
      ...turn1,
      { role: 'assistant', content: 'x'.repeat(4000) },
      { role: 'user', content: 'Now todo.md' },
    ];

    const first = await usageOf({ messages: turn1 });
    const second = await usageOf({ messages: turn2 });

    expect(cachedOf(second)).toBeGreaterThan(first.prompt_tokens - 128 - 20);
    expect(cachedOf(second)).toBeLessThan(first.prompt_tokens + 10);
  });

  it('keeps prompts apart by prompt_cache_key', async () => {
    const messages = [instructions, { role: 'user' as const, content: 'Summarise notes.md' }];

    await usageOf({ messages, prompt_cache_key: 'troupe:notes:writer' });
    const other = await usageOf({ messages, prompt_cache_key: 'troupe:notes:reviewer' });
    const same = await usageOf({ messages, prompt_cache_key: 'troupe:notes:writer' });

    expect(cachedOf(other)).toBe(0);
    expect(cachedOf(same)).toBeGreaterThanOrEqual(1024);
  });

  it('forgets a prompt 10 minutes after its last use, or 24 hours with prompt_cache_retention 24h', async () => {
    const messages = [instructions, { role: 'user' as const, content: 'Summarise notes.md' }];
    await usageOf({ messages });
    clock.advance(9 * MINUTE);
    const kept = await usageOf({ messages });
    clock.advance(10 * MINUTE);
    const forgotten = await usageOf({ messages, prompt_cache_retention: '24h' });
    clock.advance(23 * 60 * MINUTE);
    const extended = await usageOf({ messages });

    expect(cachedOf(kept)).toBeGreaterThanOrEqual(1024);
    expect(cachedOf(forgotten)).toBe(0);
    expect(cachedOf(extended)).toBeGreaterThanOrEqual(1024);
  });

  it('reports the cache read in the stream usage chunk too', async () => {
    const messages = [instructions, { role: 'user' as const, content: 'Summarise notes.md' }];
    await usageOf({ messages });
    fake.enqueue({ kind: 'message', content: 'ok' });

    const stream = await client.chat.completions.create({
      model: MODEL,
      messages,
      stream: true,
      stream_options: { include_usage: true },
    });
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) usage = chunk.usage ?? usage;

    expect(usage?.prompt_tokens_details?.cached_tokens).toBeGreaterThanOrEqual(1024);
  });

  it('caches nothing with promptCache: false, and scripted usage always wins', async () => {
    await restart({ promptCache: false });
    const messages = [instructions, { role: 'user' as const, content: 'Summarise notes.md' }];
    await usageOf({ messages });
    const uncached = await usageOf({ messages });
    fake.enqueue({
      kind: 'message',
      content: 'ok',
      usage: { inputTokens: 5000, outputTokens: 3, cachedTokens: 7 },
    });
    const scripted = await client.chat.completions.create({ model: MODEL, messages });

    expect(cachedOf(uncached)).toBe(0);
    expect(scripted.usage).toMatchObject({
      prompt_tokens: 5000,
      prompt_tokens_details: { cached_tokens: 7 },
    });
  });
});
