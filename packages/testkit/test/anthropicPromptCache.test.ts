import Anthropic from '@anthropic-ai/sdk';
import type {
  MessageCreateParamsNonStreaming,
  MessageParam,
  TextBlockParam,
  Tool,
} from '@anthropic-ai/sdk/resources/messages';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type FakeModelServer, SimulatedClock, startFakeAnthropic } from '../src/index.ts';

const MODEL = 'claude-test-model';
const MINUTE = 60_000;
/** About 1,500 tokens of instructions at the fake's 4 characters a token. */
const INSTRUCTIONS = 'Follow the house style in every answer. '.repeat(150);
const tools: Tool[] = [
  {
    name: 'read_file',
    description: 'Reads a file of the workspace',
    input_schema: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
  },
];
const ephemeral = { type: 'ephemeral' as const };

let fake: FakeModelServer;
let client: Anthropic;
let clock: SimulatedClock;

beforeEach(async () => {
  clock = new SimulatedClock();
  fake = await startFakeAnthropic({ now: () => clock.now() });
  client = new Anthropic({ apiKey: 'test', baseURL: fake.baseURL, maxRetries: 0 });
});

afterEach(async () => {
  await fake.stop();
});

function system(cached: boolean, ttl?: '5m' | '1h'): TextBlockParam[] {
  if (!cached) return [{ type: 'text', text: INSTRUCTIONS }];
  return [{ type: 'text', text: INSTRUCTIONS, cache_control: ttl ? { ...ephemeral, ttl } : ephemeral }];
}

function ask(text: string, marked = false): MessageParam {
  return { role: 'user', content: [{ type: 'text', text, ...(marked ? { cache_control: ephemeral } : {}) }] };
}

/** Sends one request the fake answers with a short text; returns the usage it reported. */
async function usageOf(params: Omit<MessageCreateParamsNonStreaming, 'model' | 'max_tokens'>) {
  fake.enqueue({ kind: 'message', content: 'ok' });
  const message = await client.messages.create({ model: MODEL, max_tokens: 100, ...params });
  return message.usage;
}

/** The whole prompt as the usage counts it. */
function prompt(usage: Anthropic.Usage): number {
  return usage.input_tokens + (usage.cache_read_input_tokens ?? 0) + (usage.cache_creation_input_tokens ?? 0);
}

/** The fake's estimate of a JSON value's tokens (about 4 characters each). */
function tokens(...values: unknown[]): number {
  return Math.ceil(values.reduce<number>((sum, value) => sum + JSON.stringify(value).length, 0) / 4);
}

async function errorOf(work: Promise<unknown>): Promise<InstanceType<typeof Anthropic.APIError>> {
  try {
    await work;
  } catch (error) {
    return error as InstanceType<typeof Anthropic.APIError>;
  }
  throw new Error('expected the call to fail, but it succeeded');
}

describe('the fake Anthropic prompt cache', () => {
  it('bills a request without cache_control whole as input_tokens, as before, and never reads', async () => {
    const params = { system: system(false), tools, messages: [ask('Summarise notes.md')] };

    const first = await usageOf(params);
    const second = await usageOf(params);

    const body = fake.requests[0]?.body;
    expect(first).toMatchObject({
      input_tokens: Math.ceil(JSON.stringify(body).length / 4),
      cache_read_input_tokens: 0,
      cache_creation_input_tokens: 0,
      cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 },
    });
    expect(second).toEqual(first);
  });

  it('writes the prefix up to a breakpoint, then reads it back; input_tokens is the rest', async () => {
    const params = { system: system(true), tools, messages: [ask('Summarise notes.md')] };

    const first = await usageOf(params);
    const second = await usageOf(params);

    const prefix = tokens(tools[0], { type: 'text', text: INSTRUCTIONS });
    expect(first.cache_creation_input_tokens).toBe(prefix);
    expect(first.cache_creation).toEqual({ ephemeral_5m_input_tokens: prefix, ephemeral_1h_input_tokens: 0 });
    expect(first.cache_read_input_tokens).toBe(0);
    expect(second.cache_read_input_tokens).toBe(prefix);
    expect(second.cache_creation_input_tokens).toBe(0);
    expect(second.input_tokens).toBe(first.input_tokens);
    expect(second.input_tokens).toBeGreaterThan(0);
    expect(prompt(second)).toBe(prompt(first));
  });

  it('reads the previous turn at the last message and writes only what the turn added', async () => {
    const call = { type: 'tool_use' as const, id: 'toolu_1', name: 'read_file', input: { path: 'notes.md' } };
    const result = { type: 'tool_result' as const, tool_use_id: 'toolu_1', content: 'x'.repeat(2000) };
    const turn2: MessageParam[] = [
      ask('Read notes.md'),
      { role: 'assistant', content: [call] },
      { role: 'user', content: [{ ...result, cache_control: ephemeral }] },
    ];

    const first = await usageOf({ system: system(true), tools, messages: [ask('Read notes.md', true)] });
    const second = await usageOf({ system: system(true), tools, messages: turn2 });

    expect(first.cache_read_input_tokens).toBe(0);
    expect(second.cache_read_input_tokens).toBe(first.cache_creation_input_tokens);
    // Each prefix is rounded up to whole tokens on its own, so the difference may be one off the blocks' size.
    expect(Math.abs((second.cache_creation_input_tokens ?? 0) - tokens(call, result))).toBeLessThanOrEqual(1);
    expect(prompt(second) - prompt(first)).toBeGreaterThan(tokens(call, result));
  });

  it('stores nothing shorter than the minimum cacheable length', async () => {
    const params = { messages: [ask('A short question?', true)] };

    const first = await usageOf(params);
    const second = await usageOf(params);

    expect(first.cache_creation_input_tokens).toBe(0);
    expect(second.cache_read_input_tokens).toBe(0);
    expect(second.input_tokens).toBe(prompt(second));
  });

  it('caches short prefixes when minCacheableTokens allows it', async () => {
    await fake.stop();
    fake = await startFakeAnthropic({ now: () => clock.now(), minCacheableTokens: 1 });
    client = new Anthropic({ apiKey: 'test', baseURL: fake.baseURL, maxRetries: 0 });
    const params = { messages: [ask('A short question?', true)] };

    await usageOf(params);
    const second = await usageOf(params);

    expect(second.cache_read_input_tokens).toBeGreaterThan(0);
  });

  it('drops a 5-minute entry 5 minutes after its last use; each read restarts the 5 minutes', async () => {
    const params = { system: system(true), messages: [ask('Summarise notes.md')] };
    const written = (await usageOf(params)).cache_creation_input_tokens;

    clock.advance(4 * MINUTE);
    const kept = await usageOf(params);
    clock.advance(4 * MINUTE);
    const refreshed = await usageOf(params);
    clock.advance(5 * MINUTE);
    const expired = await usageOf(params);

    expect(written).toBeGreaterThan(1000);
    expect(kept.cache_read_input_tokens).toBe(written);
    expect(refreshed.cache_read_input_tokens).toBe(written);
    expect(expired.cache_read_input_tokens).toBe(0);
    expect(expired.cache_creation_input_tokens).toBe(written);
  });

  it('keeps a 1-hour entry past 5 minutes and bills its write as 1h', async () => {
    const params = { system: system(true, '1h'), messages: [ask('Summarise notes.md')] };

    const first = await usageOf(params);
    clock.advance(59 * MINUTE);
    const second = await usageOf(params);
    clock.advance(61 * MINUTE);
    const third = await usageOf(params);

    expect(first.cache_creation_input_tokens).toBeGreaterThan(1000);
    expect(first.cache_creation).toEqual({
      ephemeral_5m_input_tokens: 0,
      ephemeral_1h_input_tokens: first.cache_creation_input_tokens,
    });
    expect(second.cache_read_input_tokens).toBe(first.cache_creation_input_tokens);
    expect(third.cache_read_input_tokens).toBe(0);
  });

  it('splits writes by lifetime: 1h up to the 1-hour breakpoint, 5m from there to the last one', async () => {
    const long = 'y'.repeat(6000);
    const usage = await usageOf({ system: system(true, '1h'), messages: [ask(long, true)] });

    const upToSystem = tokens({ type: 'text', text: INSTRUCTIONS });
    expect(usage.cache_creation?.ephemeral_1h_input_tokens).toBe(upToSystem);
    expect(usage.cache_creation_input_tokens).toBe(
      (usage.cache_creation?.ephemeral_1h_input_tokens ?? 0) +
        (usage.cache_creation?.ephemeral_5m_input_tokens ?? 0),
    );
    expect(usage.cache_creation?.ephemeral_5m_input_tokens).toBeGreaterThan(1400);
  });

  it('finds a cached prefix up to 20 blocks before a breakpoint, not 21', async () => {
    const filler = (n: number) =>
      Array.from(
        { length: n },
        (_, i): MessageParam => ({ role: i % 2 ? 'assistant' : 'user', content: `turn ${i}` }),
      );
    // Caches the prefix that ends at the system block (block 0); the later breakpoint sits n + 1 blocks after it.
    await usageOf({ system: system(true), messages: [ask('first')] });
    const breakpointAfter = (n: number) =>
      usageOf({ system: system(false), messages: [...filler(n), ask('now?', true)] });

    const within = await breakpointAfter(19);
    const beyond = await breakpointAfter(20);

    const cachedSystem = tokens({ type: 'text', text: INSTRUCTIONS });
    expect(within.cache_read_input_tokens).toBe(cachedSystem);
    expect(beyond.cache_read_input_tokens).toBe(0);
  });

  it('answers more than 4 breakpoints with the API 400, using no reply', async () => {
    const marked = (text: string): TextBlockParam => ({ type: 'text', text, cache_control: ephemeral });
    fake.enqueue({ kind: 'message', content: 'kept' });

    const error = await errorOf(
      client.messages.create({
        model: MODEL,
        max_tokens: 100,
        system: [marked('a'), marked('b'), marked('c')],
        messages: [{ role: 'user', content: [marked('d'), marked('e')] }],
      }),
    );
    const next = await client.messages.create({ model: MODEL, max_tokens: 100, messages: [ask('hi')] });

    expect(error).toBeInstanceOf(Anthropic.BadRequestError);
    expect(error.type).toBe('invalid_request_error');
    expect(error.message).toContain('A maximum of 4 blocks with cache_control may be provided. Found 5.');
    expect(next.content[0]).toMatchObject({ text: 'kept' });
  });

  it('answers a 1-hour breakpoint after a 5-minute one with the API 400 naming the block', async () => {
    const error = await errorOf(
      client.messages.create({
        model: MODEL,
        max_tokens: 100,
        tools: [{ ...(tools[0] as Tool), cache_control: ephemeral }],
        system: system(true, '1h'),
        messages: [ask('hi')],
      }),
    );

    expect(error).toBeInstanceOf(Anthropic.BadRequestError);
    expect(error.message).toContain(
      "system.0.cache_control.ttl: a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block",
    );
  });

  it('reports the same usage in a stream as in JSON', async () => {
    const params = { system: system(true), messages: [ask('Summarise notes.md')] };
    await usageOf(params);
    fake.enqueue({ kind: 'message', content: 'ok' });

    const streamed = await client.messages
      .stream({ model: MODEL, max_tokens: 100, ...params })
      .finalMessage();
    const json = await usageOf(params);

    // The streamed body differs by its `stream: true`, which the estimate counts as fresh input.
    const streamedBody = fake.requests[1]?.body;
    const withoutMarkers = JSON.parse(
      JSON.stringify(streamedBody, (k, v) => (k === 'cache_control' ? undefined : v)),
    );
    expect(streamed.usage).toMatchObject({
      cache_read_input_tokens: json.cache_read_input_tokens,
      cache_creation_input_tokens: 0,
      input_tokens: tokens(withoutMarkers) - (json.cache_read_input_tokens ?? 0),
    });
    expect(json.cache_read_input_tokens).toBeGreaterThan(0);
  });

  it('sends scripted usage as given, cache writes included, while still keeping the cache', async () => {
    const params = { system: system(true), messages: [ask('Summarise notes.md')] };
    fake.enqueue({
      kind: 'message',
      content: 'ok',
      usage: {
        inputTokens: 10,
        outputTokens: 2,
        cachedTokens: 0,
        cacheWriteTokens: 300,
        cacheWrite1hTokens: 100,
      },
    });

    const scripted = await client.messages.create({ model: MODEL, max_tokens: 100, ...params });
    const after = await usageOf(params);

    expect(scripted.usage).toMatchObject({
      input_tokens: 10,
      output_tokens: 2,
      cache_creation_input_tokens: 300,
      cache_creation: { ephemeral_5m_input_tokens: 200, ephemeral_1h_input_tokens: 100 },
    });
    expect(after.cache_read_input_tokens).toBeGreaterThan(1000);
  });
});
