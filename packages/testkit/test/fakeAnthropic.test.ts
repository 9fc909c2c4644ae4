import Anthropic from '@anthropic-ai/sdk';
import type { MessageParam, RawMessageStreamEvent, Tool } from '@anthropic-ai/sdk/resources/messages';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type FakeModelServer, startFakeAnthropic } from '../src/index.ts';

// Not a real model id, so the SDK's deprecation warnings stay out of the way.
const MODEL = 'claude-test-model';
const messages: MessageParam[] = [{ role: 'user', content: 'What is the weather in Paris and Oslo?' }];
const tools: Tool[] = [
  {
    name: 'get_weather',
    description: 'Current weather for a city',
    input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
];
const base = { model: MODEL, max_tokens: 256, messages };
const PARIS_ARGS = '{"city":"Paris","unit":"celsius"}';
const OSLO_ARGS = '{"city":"Oslo","unit":"celsius"}';

let fake: FakeModelServer;
let client: Anthropic;

beforeEach(async () => {
  fake = await startFakeAnthropic();
  client = new Anthropic({ apiKey: 'test', baseURL: fake.baseURL, maxRetries: 0 });
});

afterEach(async () => {
  await fake.stop();
});

async function errorOf(work: Promise<unknown>): Promise<unknown> {
  try {
    await work;
  } catch (error) {
    return error;
  }
  throw new Error('expected the call to fail, but it succeeded');
}

async function rawEvents(): Promise<RawMessageStreamEvent[]> {
  const events: RawMessageStreamEvent[] = [];
  for await (const event of await client.messages.create({ ...base, tools, stream: true }))
    events.push(event);
  return events;
}

describe('startFakeAnthropic', () => {
  it('serves a scripted text reply as a Message that echoes the model', async () => {
    fake.enqueue({ kind: 'message', content: 'Sunny in Paris.' });

    const message = await client.messages.create(base);

    expect(fake.baseURL).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(message).toMatchObject({
      type: 'message',
      role: 'assistant',
      model: MODEL,
      content: [{ type: 'text', text: 'Sunny in Paris.' }],
      stop_reason: 'end_turn',
      stop_sequence: null,
    });
    expect(message.id).toMatch(/^msg_/);
    expect(message._request_id).toMatch(/^req_/);
  });

  it('round-trips two tool calls into tool_use blocks with parsed input', async () => {
    fake.enqueue({
      kind: 'message',
      content: 'Let me check.',
      toolCalls: [
        { id: 'toolu_paris', name: 'get_weather', arguments: PARIS_ARGS },
        { name: 'get_weather', arguments: OSLO_ARGS },
      ],
    });

    const message = await client.messages.create({ ...base, tools });

    expect(message.stop_reason).toBe('tool_use');
    expect(message.content).toHaveLength(3);
    expect(message.content[0]).toMatchObject({ type: 'text', text: 'Let me check.' });
    expect(message.content[1]).toEqual({
      type: 'tool_use',
      id: 'toolu_paris',
      name: 'get_weather',
      input: { city: 'Paris', unit: 'celsius' },
    });
    const second = message.content[2];
    expect(second?.type === 'tool_use' && second.input).toEqual({ city: 'Oslo', unit: 'celsius' });
    expect(second?.type === 'tool_use' && second.id).toMatch(/^toolu_/);
  });

  it('omits the text block when a tool-call reply has no content', async () => {
    fake.enqueue({ kind: 'message', toolCalls: [{ name: 'get_weather', arguments: PARIS_ARGS }] });

    const message = await client.messages.create({ ...base, tools });

    expect(message.content.map((block) => block.type)).toEqual(['tool_use']);
  });

  it('sends malformed arguments in JSON mode as the raw string input', async () => {
    const broken = '{"city": "Paris", "unit": ';
    fake.enqueue({ kind: 'message', toolCalls: [{ name: 'get_weather', arguments: broken }] });

    const message = await client.messages.create({ ...base, tools });

    expect(message.content[0]).toMatchObject({ type: 'tool_use', input: broken });
  });

  it('streams text in several deltas that add up to the same text as the JSON reply', async () => {
    const text = 'It is sunny in Paris, with a light breeze from the west.';
    fake.enqueue({ kind: 'message', content: text }, { kind: 'message', content: text });

    const json = await client.messages.create(base);
    const stream = client.messages.stream(base);
    const deltas: string[] = [];
    stream.on('text', (delta) => deltas.push(delta));
    const final = await stream.finalMessage();

    expect(deltas.length).toBeGreaterThan(3);
    expect(deltas.join('')).toBe(text);
    const texts = (content: Anthropic.ContentBlock[]) =>
      content.map((b) => (b.type === 'text' ? b.text : b.type));
    expect(texts(final.content)).toEqual(texts(json.content));
    expect(final.stop_reason).toBe('end_turn');
    expect(final.model).toBe(MODEL);
  });

  it('sends the SSE events in protocol order with a ping', async () => {
    const reply = {
      kind: 'message' as const,
      content: 'Checking.',
      toolCalls: [{ id: 'toolu_paris', name: 'get_weather', arguments: PARIS_ARGS }],
    };
    fake.enqueue(reply, reply);

    const types = (await rawEvents()).map((event) => event.type);

    const compact = types.filter((type, i) => type !== types[i - 1]);
    expect(compact).toEqual([
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_stop',
      'content_block_start',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    const raw = await fetch(`${fake.baseURL}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...base, stream: true }),
    }).then((r) => r.text());
    expect(raw).toMatch(/^event: message_start\ndata: \{/);
    expect(raw).toContain('event: ping\ndata: {"type":"ping"}\n\n');
  });

  it('streams tool input as several input_json_delta pieces that reassemble to the scripted JSON', async () => {
    fake.enqueue({
      kind: 'message',
      toolCalls: [
        { id: 'toolu_paris', name: 'get_weather', arguments: PARIS_ARGS },
        { id: 'toolu_oslo', name: 'get_weather', arguments: OSLO_ARGS },
      ],
    });

    const stream = client.messages.stream({ ...base, tools });
    const pieces: string[] = [];
    stream.on('inputJson', (partial) => pieces.push(partial));
    const final = await stream.finalMessage();

    expect(pieces.length).toBeGreaterThan(4);
    expect(pieces.join('')).toBe(PARIS_ARGS + OSLO_ARGS);
    expect(final.stop_reason).toBe('tool_use');
    expect(final.content).toEqual([
      { type: 'tool_use', id: 'toolu_paris', name: 'get_weather', input: { city: 'Paris', unit: 'celsius' } },
      { type: 'tool_use', id: 'toolu_oslo', name: 'get_weather', input: { city: 'Oslo', unit: 'celsius' } },
    ]);
  });

  it('streams malformed tool arguments unchanged', async () => {
    const broken = '{"city": "Paris", "unit": ';
    fake.enqueue({ kind: 'message', toolCalls: [{ name: 'get_weather', arguments: broken }] });

    const events = await rawEvents();

    const partial = events
      .map((e) =>
        e.type === 'content_block_delta' && e.delta.type === 'input_json_delta' ? e.delta.partial_json : '',
      )
      .join('');
    expect(partial).toBe(broken);
  });

  it('reports scripted usage, cache reads included, in JSON and in the stream', async () => {
    const usage = { inputTokens: 1200, outputTokens: 34, cachedTokens: 1024 };
    fake.enqueue({ kind: 'message', content: 'ok', usage }, { kind: 'message', content: 'ok', usage });

    const json = await client.messages.create(base);
    const streamed = await client.messages.stream(base).finalMessage();

    const expected = {
      input_tokens: 1200,
      output_tokens: 34,
      cache_read_input_tokens: 1024,
      cache_creation_input_tokens: 0,
    };
    expect(json.usage).toMatchObject(expected);
    expect(streamed.usage).toMatchObject(expected);
  });

  it('carries input usage in message_start, and the cumulative usage in message_delta as the API does', async () => {
    fake.enqueue({
      kind: 'message',
      content: 'ok',
      usage: {
        inputTokens: 50,
        outputTokens: 7,
        cachedTokens: 20,
        cacheWriteTokens: 30,
        cacheWrite1hTokens: 10,
      },
    });

    const events = await rawEvents();

    const start = events.find((e) => e.type === 'message_start');
    const delta = events.find((e) => e.type === 'message_delta');
    expect(start?.type === 'message_start' && start.message.usage).toMatchObject({
      input_tokens: 50,
      cache_read_input_tokens: 20,
    });
    expect(delta?.type === 'message_delta' && delta.usage).toEqual({
      input_tokens: 50,
      cache_creation_input_tokens: 30,
      cache_read_input_tokens: 20,
      output_tokens: 7,
    });
    expect(delta?.type === 'message_delta' && delta.delta.stop_reason).toBe('end_turn');
  });

  it('maps finishReason length to max_tokens', async () => {
    fake.enqueue({ kind: 'message', content: 'cut sh', finishReason: 'length' });

    const message = await client.messages.create(base);

    expect(message.stop_reason).toBe('max_tokens');
  });

  it('turns a scripted 429 into RateLimitError with retry-after passed through', async () => {
    fake.enqueue({ kind: 'error', status: 429, message: 'slow down', headers: { 'retry-after': '1' } });

    const error = await errorOf(client.messages.create(base));

    expect(error).toBeInstanceOf(Anthropic.RateLimitError);
    const rateLimit = error as InstanceType<typeof Anthropic.RateLimitError>;
    expect(rateLimit.headers.get('retry-after')).toBe('1');
    expect(rateLimit.type).toBe('rate_limit_error');
    expect(rateLimit.message).toContain('slow down');
    expect(rateLimit.requestID).toMatch(/^req_/);
    expect(rateLimit.error).toMatchObject({ type: 'error', error: { type: 'rate_limit_error' } });
  });

  it('turns 500 into InternalServerError (api_error) and 529 into OverloadedError', async () => {
    fake.enqueue({ kind: 'error', status: 500 }, { kind: 'error', status: 529 });

    const internal = await errorOf(client.messages.create(base));
    const overloaded = await errorOf(client.messages.create(base));

    expect(internal).toBeInstanceOf(Anthropic.InternalServerError);
    expect((internal as InstanceType<typeof Anthropic.APIError>).type).toBe('api_error');
    expect(overloaded).toBeInstanceOf(Anthropic.OverloadedError);
    expect((overloaded as InstanceType<typeof Anthropic.APIError>).type).toBe('overloaded_error');
  });

  it('answers a wrong x-api-key with 401 authentication_error without using up a reply', async () => {
    await fake.stop();
    fake = await startFakeAnthropic({
      requireApiKey: 'sk-right',
      replies: [{ kind: 'message', content: 'in' }],
    });
    const wrong = new Anthropic({ apiKey: 'sk-wrong', baseURL: fake.baseURL, maxRetries: 0 });
    const right = new Anthropic({ apiKey: 'sk-right', baseURL: fake.baseURL, maxRetries: 0 });

    const error = await errorOf(wrong.messages.create(base));
    const message = await right.messages.create(base);

    expect(error).toBeInstanceOf(Anthropic.AuthenticationError);
    expect((error as InstanceType<typeof Anthropic.APIError>).type).toBe('authentication_error');
    expect(message.content[0]).toMatchObject({ text: 'in' });
  });

  it('also accepts the key in x-api-key, as the HTTP API documents', async () => {
    await fake.stop();
    fake = await startFakeAnthropic({
      requireApiKey: 'sk-right',
      replies: [{ kind: 'message', content: 'in' }],
    });
    const send = (key: string) =>
      fetch(`${fake.baseURL}/v1/messages`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': key },
        body: JSON.stringify(base),
      });

    const refused = await send('sk-wrong');
    const accepted = await send('sk-right');

    expect(refused.status).toBe(401);
    expect(await refused.json()).toMatchObject({ type: 'error', error: { type: 'authentication_error' } });
    expect(refused.headers.get('request-id')).toMatch(/^req_/);
    expect(accepted.status).toBe(200);
  });

  it('scripted 401 becomes AuthenticationError', async () => {
    fake.enqueue({ kind: 'error', status: 401 });

    await expect(client.messages.create(base)).rejects.toBeInstanceOf(Anthropic.AuthenticationError);
  });

  it('hangs until the client times out, and stop() still returns promptly', async () => {
    fake.enqueue({ kind: 'hang' }, { kind: 'hang' });
    const impatient = new Anthropic({ apiKey: 'test', baseURL: fake.baseURL, maxRetries: 0, timeout: 200 });

    const error = await errorOf(impatient.messages.create(base));
    expect(error).toBeInstanceOf(Anthropic.APIConnectionTimeoutError);

    const pending = client.messages.create(base).catch((e: unknown) => e);
    await waitFor(() => fake.requests.length === 2);
    const started = Date.now();
    await fake.stop();
    expect(Date.now() - started).toBeLessThan(1000);
    expect(await pending).toBeInstanceOf(Anthropic.APIConnectionError);
  });

  it('stop() cuts a delayed reply short', async () => {
    fake.enqueue({ kind: 'message', content: 'late', delayMs: 10_000 });

    const pending = client.messages.create(base).catch((e: unknown) => e);
    await waitFor(() => fake.requests.length === 1);
    const started = Date.now();
    await fake.stop();

    expect(Date.now() - started).toBeLessThan(1000);
    expect(await pending).toBeInstanceOf(Anthropic.APIConnectionError);
  });

  it('delays the response by delayMs', async () => {
    fake.enqueue({ kind: 'message', content: 'late', delayMs: 300 });

    const started = Date.now();
    const message = await client.messages.create(base);

    expect(Date.now() - started).toBeGreaterThanOrEqual(280);
    expect(message.content[0]).toMatchObject({ text: 'late' });
  });

  it('resets the connection into APIConnectionError (not a timeout)', async () => {
    fake.enqueue({ kind: 'reset' });

    const error = await errorOf(client.messages.create(base));

    expect(error).toBeInstanceOf(Anthropic.APIConnectionError);
    expect(error).not.toBeInstanceOf(Anthropic.APIConnectionTimeoutError);
  });

  it('makes the SDK reject a garbage body, JSON and streamed', async () => {
    fake.enqueue({ kind: 'garbage' }, { kind: 'garbage' });
    const quiet = new Anthropic({ apiKey: 'test', baseURL: fake.baseURL, maxRetries: 0, logLevel: 'off' });

    await expect(quiet.messages.create(base)).rejects.toThrow();
    await expect(quiet.messages.stream(base).finalMessage()).rejects.toThrow();
  });

  it('records each request with its parsed body and headers before answering', async () => {
    fake.enqueue({ kind: 'hang' });
    const impatient = new Anthropic({ apiKey: 'test', baseURL: fake.baseURL, maxRetries: 0, timeout: 200 });

    await errorOf(impatient.messages.create({ ...base, tools, system: 'Be brief.' }));

    expect(fake.requests).toHaveLength(1);
    const [request] = fake.requests;
    expect(request?.method).toBe('POST');
    expect(request?.path).toBe('/v1/messages');
    // @anthropic-ai/sdk 1.x sends the key as a bearer token rather than x-api-key.
    expect(request?.headers.authorization).toBe('Bearer test');
    expect(request?.headers['anthropic-version']).toBeDefined();
    expect(request?.body).toMatchObject({
      model: MODEL,
      max_tokens: 256,
      messages,
      tools,
      system: 'Be brief.',
    });
  });

  it('answers 500 "no scripted reply left" once the queue is empty', async () => {
    await fake.stop();
    fake = await startFakeAnthropic({ replies: [{ kind: 'message', content: 'only one' }] });
    client = new Anthropic({ apiKey: 'test', baseURL: fake.baseURL, maxRetries: 0 });

    await client.messages.create(base);
    const error = await errorOf(client.messages.create(base));

    expect(error).toBeInstanceOf(Anthropic.InternalServerError);
    expect((error as Error).message).toContain('fake server: no scripted reply left');
    expect((error as InstanceType<typeof Anthropic.APIError>).type).toBe('api_error');
    expect(fake.requests).toHaveLength(2);
  });
});

async function waitFor(condition: () => boolean, timeoutMs = 2000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
