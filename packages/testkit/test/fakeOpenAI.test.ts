import OpenAI from 'openai';
import type { ChatCompletionChunk, ChatCompletionTool } from 'openai/resources/chat/completions';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type FakeModelServer, startFakeOpenAI } from '../src/index.ts';

const MODEL = 'gpt-4o-mini';
const messages = [{ role: 'user' as const, content: 'What is the weather in Paris and Oslo?' }];
const tools: ChatCompletionTool[] = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Current weather for a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  },
];
const PARIS_ARGS = '{"city":"Paris","unit":"celsius"}';
const OSLO_ARGS = '{"city":"Oslo","unit":"celsius"}';

let fake: FakeModelServer;
let client: OpenAI;

beforeEach(async () => {
  fake = await startFakeOpenAI();
  client = new OpenAI({ apiKey: 'test', baseURL: fake.baseURL, maxRetries: 0 });
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

async function collect(stream: AsyncIterable<ChatCompletionChunk>): Promise<ChatCompletionChunk[]> {
  const chunks: ChatCompletionChunk[] = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

describe('startFakeOpenAI', () => {
  it('serves a scripted text reply as a chat.completion that echoes the model', async () => {
    fake.enqueue({ kind: 'message', content: 'Sunny in Paris.' });

    const completion = await client.chat.completions.create({ model: MODEL, messages });

    expect(fake.baseURL).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/v1$/);
    expect(completion.object).toBe('chat.completion');
    expect(completion.model).toBe(MODEL);
    expect(completion.choices[0]?.message).toMatchObject({ role: 'assistant', content: 'Sunny in Paris.' });
    expect(completion.choices[0]?.message.tool_calls).toBeUndefined();
    expect(completion.choices[0]?.finish_reason).toBe('stop');
    expect(completion._request_id).toMatch(/^req_/);
  });

  it('round-trips two tool calls into typed tool_calls with content null', async () => {
    fake.enqueue({
      kind: 'message',
      toolCalls: [
        { id: 'call_paris', name: 'get_weather', arguments: PARIS_ARGS },
        { name: 'get_weather', arguments: OSLO_ARGS },
      ],
    });

    const completion = await client.chat.completions.create({ model: MODEL, messages, tools });

    const choice = completion.choices[0];
    expect(choice?.finish_reason).toBe('tool_calls');
    expect(choice?.message.content).toBeNull();
    const calls = choice?.message.tool_calls ?? [];
    expect(calls).toHaveLength(2);
    expect(calls[0]).toEqual({
      id: 'call_paris',
      type: 'function',
      function: { name: 'get_weather', arguments: PARIS_ARGS },
    });
    expect(calls[1]?.id).toMatch(/^call_/);
    expect(calls[1]?.id).not.toBe('call_paris');
    expect(calls[1]?.type === 'function' && JSON.parse(calls[1].function.arguments)).toEqual({
      city: 'Oslo',
      unit: 'celsius',
    });
  });

  it('streams text in several deltas that add up to the same text as the JSON reply', async () => {
    const text = 'It is sunny in Paris, with a light breeze from the west.';
    fake.enqueue({ kind: 'message', content: text }, { kind: 'message', content: text });

    const json = await client.chat.completions.create({ model: MODEL, messages });
    const chunks = await collect(
      await client.chat.completions.create({
        model: MODEL,
        messages,
        stream: true,
        stream_options: { include_usage: true },
      }),
    );

    const pieces = chunks.flatMap((c) => c.choices.map((choice) => choice.delta.content ?? ''));
    expect(pieces.filter((p) => p !== '').length).toBeGreaterThan(3);
    expect(pieces.join('')).toBe(json.choices[0]?.message.content);
    expect(chunks.every((c) => c.object === 'chat.completion.chunk' && c.model === MODEL)).toBe(true);
    expect(chunks[0]?.choices[0]?.delta.role).toBe('assistant');
    expect(chunks.at(-2)?.choices[0]?.finish_reason).toBe('stop');
    expect(chunks.at(-1)?.choices).toEqual([]);
    expect(chunks.at(-1)?.usage?.completion_tokens).toBeGreaterThan(0);
  });

  it('sends no usage chunk unless stream_options.include_usage is set', async () => {
    fake.enqueue({ kind: 'message', content: 'hello' });

    const chunks = await collect(
      await client.chat.completions.create({ model: MODEL, messages, stream: true }),
    );

    expect(chunks.every((c) => c.choices.length === 1 && !c.usage)).toBe(true);
    expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe('stop');
  });

  it('streams each tool call by index, id and name first, arguments in several pieces', async () => {
    fake.enqueue({
      kind: 'message',
      content: 'Checking both.',
      toolCalls: [
        { id: 'call_paris', name: 'get_weather', arguments: PARIS_ARGS },
        { id: 'call_oslo', name: 'get_weather', arguments: OSLO_ARGS },
      ],
    });

    const chunks = await collect(
      await client.chat.completions.create({ model: MODEL, messages, tools, stream: true }),
    );

    const calls: { id?: string; name?: string; arguments: string; pieces: number }[] = [];
    for (const delta of chunks.flatMap((c) => c.choices[0]?.delta.tool_calls ?? [])) {
      const call = calls[delta.index] ?? { arguments: '', pieces: 0 };
      calls[delta.index] = call;
      if (delta.id) {
        expect(call.arguments).toBe('');
        call.id = delta.id;
      }
      if (delta.function?.name) call.name = delta.function.name;
      if (delta.function?.arguments) {
        call.arguments += delta.function.arguments;
        call.pieces += 1;
      }
    }
    expect(calls.map(({ id, name, arguments: args }) => ({ id, name, args }))).toEqual([
      { id: 'call_paris', name: 'get_weather', args: PARIS_ARGS },
      { id: 'call_oslo', name: 'get_weather', args: OSLO_ARGS },
    ]);
    expect(calls.every((c) => c.pieces > 1)).toBe(true);
    expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe('tool_calls');
  });

  it("satisfies the SDK's own stream accumulator (chat.completions.stream)", async () => {
    fake.enqueue({
      kind: 'message',
      content: 'Checking.',
      toolCalls: [{ id: 'call_paris', name: 'get_weather', arguments: PARIS_ARGS }],
    });

    const final = await client.chat.completions
      .stream({ model: MODEL, messages, tools })
      .finalChatCompletion();

    expect(final.choices[0]?.message.content).toBe('Checking.');
    expect(final.choices[0]?.message.tool_calls?.[0]).toMatchObject({
      id: 'call_paris',
      function: { name: 'get_weather', arguments: PARIS_ARGS },
    });
    expect(final.choices[0]?.finish_reason).toBe('tool_calls');
  });

  it('streams malformed tool arguments unchanged', async () => {
    const broken = '{"city": "Paris", "unit": ';
    fake.enqueue({ kind: 'message', toolCalls: [{ name: 'get_weather', arguments: broken }] });

    const chunks = await collect(
      await client.chat.completions.create({ model: MODEL, messages, tools, stream: true }),
    );

    const args = chunks
      .flatMap((c) => c.choices[0]?.delta.tool_calls ?? [])
      .map((d) => d.function?.arguments ?? '')
      .join('');
    expect(args).toBe(broken);
  });

  it('reports scripted usage, cached tokens included, in JSON and in the stream', async () => {
    const usage = { inputTokens: 1200, outputTokens: 34, cachedTokens: 1024 };
    fake.enqueue({ kind: 'message', content: 'ok', usage }, { kind: 'message', content: 'ok', usage });

    const json = await client.chat.completions.create({ model: MODEL, messages });
    const chunks = await collect(
      await client.chat.completions.create({
        model: MODEL,
        messages,
        stream: true,
        stream_options: { include_usage: true },
      }),
    );

    const expected = {
      prompt_tokens: 1200,
      completion_tokens: 34,
      total_tokens: 1234,
      prompt_tokens_details: { cached_tokens: 1024 },
    };
    expect(json.usage).toMatchObject(expected);
    expect(chunks.at(-1)?.usage).toMatchObject(expected);
  });

  it('passes the scripted content through for a json_schema response_format', async () => {
    const response_format = {
      type: 'json_schema' as const,
      json_schema: {
        name: 'weather',
        strict: true,
        schema: {
          type: 'object',
          properties: { temp: { type: 'number' } },
          required: ['temp'],
          additionalProperties: false,
        },
      },
    };
    fake.enqueue({ kind: 'message', content: '{"temp":21}' }, { kind: 'message', content: '{"temp":' });

    const parsed = await client.chat.completions.parse({ model: MODEL, messages, response_format });
    const invalid = client.chat.completions.parse({ model: MODEL, messages, response_format });

    expect(parsed.choices[0]?.message.parsed).toEqual({ temp: 21 });
    await expect(invalid).rejects.toThrow();
    expect(fake.requests[0]?.body.response_format).toEqual(response_format);
  });

  it('turns a scripted 429 into RateLimitError with retry-after passed through', async () => {
    fake.enqueue({ kind: 'error', status: 429, message: 'slow down', headers: { 'retry-after': '1' } });

    const error = await errorOf(client.chat.completions.create({ model: MODEL, messages }));

    expect(error).toBeInstanceOf(OpenAI.RateLimitError);
    const rateLimit = error as InstanceType<typeof OpenAI.RateLimitError>;
    expect(rateLimit.status).toBe(429);
    expect(rateLimit.headers.get('retry-after')).toBe('1');
    expect(rateLimit.message).toContain('slow down');
    expect(rateLimit.type).toBe('rate_limit_error');
    expect(rateLimit.code).toBe('rate_limit_exceeded');
    expect(rateLimit.requestID).toMatch(/^req_/);
  });

  it('turns a scripted 500 into InternalServerError of type server_error', async () => {
    fake.enqueue({ kind: 'error', status: 500 });

    const error = await errorOf(client.chat.completions.create({ model: MODEL, messages }));

    expect(error).toBeInstanceOf(OpenAI.InternalServerError);
    expect((error as InstanceType<typeof OpenAI.APIError>).type).toBe('server_error');
  });

  it('keeps a scripted error type', async () => {
    fake.enqueue({ kind: 'error', status: 429, type: 'insufficient_quota', message: 'out of credit' });

    const error = await errorOf(client.chat.completions.create({ model: MODEL, messages }));

    expect(error).toBeInstanceOf(OpenAI.RateLimitError);
    expect((error as InstanceType<typeof OpenAI.APIError>).type).toBe('insufficient_quota');
  });

  it('sends a scripted param, and null without one', async () => {
    fake.enqueue({ kind: 'error', status: 400, message: 'too long', param: 'messages' });
    fake.enqueue({ kind: 'error', status: 400, message: 'bad' });

    const named = await errorOf(client.chat.completions.create({ model: MODEL, messages }));
    const unnamed = await errorOf(client.chat.completions.create({ model: MODEL, messages }));

    expect((named as InstanceType<typeof OpenAI.APIError>).param).toBe('messages');
    expect((unnamed as InstanceType<typeof OpenAI.APIError>).param).toBeNull();
  });

  it('answers a wrong API key with 401 invalid_api_key without using up a reply', async () => {
    await fake.stop();
    fake = await startFakeOpenAI({
      requireApiKey: 'sk-right',
      replies: [{ kind: 'message', content: 'in' }],
    });
    const wrong = new OpenAI({ apiKey: 'sk-wrong', baseURL: fake.baseURL, maxRetries: 0 });
    const right = new OpenAI({ apiKey: 'sk-right', baseURL: fake.baseURL, maxRetries: 0 });

    const error = await errorOf(wrong.chat.completions.create({ model: MODEL, messages }));
    const completion = await right.chat.completions.create({ model: MODEL, messages });

    expect(error).toBeInstanceOf(OpenAI.AuthenticationError);
    expect((error as InstanceType<typeof OpenAI.APIError>).code).toBe('invalid_api_key');
    expect(completion.choices[0]?.message.content).toBe('in');
  });

  it('scripted 401 becomes AuthenticationError', async () => {
    fake.enqueue({ kind: 'error', status: 401 });

    await expect(client.chat.completions.create({ model: MODEL, messages })).rejects.toBeInstanceOf(
      OpenAI.AuthenticationError,
    );
  });

  it('hangs until the client times out, and stop() still returns promptly', async () => {
    fake.enqueue({ kind: 'hang' }, { kind: 'hang' });
    const impatient = new OpenAI({ apiKey: 'test', baseURL: fake.baseURL, maxRetries: 0, timeout: 200 });

    const error = await errorOf(impatient.chat.completions.create({ model: MODEL, messages }));
    expect(error).toBeInstanceOf(OpenAI.APIConnectionTimeoutError);

    const pending = client.chat.completions.create({ model: MODEL, messages }).catch((e: unknown) => e);
    await waitFor(() => fake.requests.length === 2);
    const started = Date.now();
    await fake.stop();
    expect(Date.now() - started).toBeLessThan(1000);
    expect(await pending).toBeInstanceOf(OpenAI.APIConnectionError);
  });

  it('resets the connection into APIConnectionError (not a timeout)', async () => {
    fake.enqueue({ kind: 'reset' });

    const error = await errorOf(client.chat.completions.create({ model: MODEL, messages }));

    expect(error).toBeInstanceOf(OpenAI.APIConnectionError);
    expect(error).not.toBeInstanceOf(OpenAI.APIConnectionTimeoutError);
  });

  it('makes the SDK reject a garbage body, JSON and streamed', async () => {
    fake.enqueue({ kind: 'garbage' }, { kind: 'garbage' });
    const quiet = new OpenAI({ apiKey: 'test', baseURL: fake.baseURL, maxRetries: 0, logLevel: 'off' });

    await expect(quiet.chat.completions.create({ model: MODEL, messages })).rejects.toThrow();
    await expect(
      collect(await quiet.chat.completions.create({ model: MODEL, messages, stream: true })),
    ).rejects.toThrow();
  });

  it('delays the response by delayMs', async () => {
    fake.enqueue({ kind: 'message', content: 'late', delayMs: 300 });

    const started = Date.now();
    const completion = await client.chat.completions.create({ model: MODEL, messages });

    expect(Date.now() - started).toBeGreaterThanOrEqual(280);
    expect(completion.choices[0]?.message.content).toBe('late');
  });

  it('records each request with its parsed body and headers before answering', async () => {
    fake.enqueue({ kind: 'hang' });
    const impatient = new OpenAI({ apiKey: 'test', baseURL: fake.baseURL, maxRetries: 0, timeout: 200 });

    await errorOf(impatient.chat.completions.create({ model: MODEL, messages, tools, temperature: 0 }));

    expect(fake.requests).toHaveLength(1);
    const [request] = fake.requests;
    expect(request?.method).toBe('POST');
    expect(request?.path).toBe('/v1/chat/completions');
    expect(request?.headers.authorization).toBe('Bearer test');
    expect(request?.body).toMatchObject({ model: MODEL, messages, tools, temperature: 0 });
  });

  it('answers 500 "no scripted reply left" once the queue is empty', async () => {
    await fake.stop();
    fake = await startFakeOpenAI({ replies: [{ kind: 'message', content: 'only one' }] });
    client = new OpenAI({ apiKey: 'test', baseURL: fake.baseURL, maxRetries: 0 });

    await client.chat.completions.create({ model: MODEL, messages });
    const error = await errorOf(client.chat.completions.create({ model: MODEL, messages }));

    expect(error).toBeInstanceOf(OpenAI.InternalServerError);
    expect((error as Error).message).toContain('fake server: no scripted reply left');
    expect(fake.requests).toHaveLength(2);
  });

  it('reports the configured model instead of the requested one', async () => {
    await fake.stop();
    fake = await startFakeOpenAI({
      model: 'gpt-4o-2024-08-06',
      replies: [{ kind: 'message', content: 'x' }],
    });
    client = new OpenAI({ apiKey: 'test', baseURL: fake.baseURL, maxRetries: 0 });

    const completion = await client.chat.completions.create({ model: 'gpt-4o', messages });

    expect(completion.model).toBe('gpt-4o-2024-08-06');
  });

  it('plays a strict compatible server: 400 naming each unknown field, no reply used, others pass', async () => {
    await fake.stop();
    fake = await startFakeOpenAI({
      rejectUnknownFields: ['prompt_cache_key', 'prompt_cache_retention'],
      replies: [{ kind: 'message', content: 'in' }],
    });
    client = new OpenAI({ apiKey: 'test', baseURL: fake.baseURL, maxRetries: 0 });

    const one = await errorOf(
      client.chat.completions.create({ model: MODEL, messages, prompt_cache_key: 'troupe:notes:writer' }),
    );
    const two = await errorOf(
      client.chat.completions.create({
        model: MODEL,
        messages,
        prompt_cache_key: 'k',
        prompt_cache_retention: '24h',
      }),
    );
    const plain = await client.chat.completions.create({ model: MODEL, messages, temperature: 0 });

    expect(one).toBeInstanceOf(OpenAI.BadRequestError);
    const bad = one as InstanceType<typeof OpenAI.BadRequestError>;
    expect(bad.message).toBe(
      '400 1 validation error for ChatCompletionRequest\nprompt_cache_key\n  Extra inputs are not permitted ' +
        "[type=extra_forbidden, input_value='troupe:notes:writer', input_type=str]",
    );
    expect(bad.type).toBe('BadRequestError');
    expect(bad.requestID).toMatch(/^req_/);
    expect((two as Error).message).toMatch(
      /^400 2 validation errors for ChatCompletionRequest\nprompt_cache_key\n/,
    );
    expect((two as Error).message).toContain('\nprompt_cache_retention\n  Extra inputs are not permitted');
    expect(plain.choices[0]?.message.content).toBe('in');
    expect(fake.requests).toHaveLength(3);
  });

  it.each([
    [
      'vllm-legacy',
      400,
      (body: unknown) =>
        expect(body).toEqual({
          object: 'error',
          message:
            '1 validation error for ChatCompletionRequest\nprompt_cache_key\n  Extra inputs are not permitted ' +
            "[type=extra_forbidden, input_value='k', input_type=str]",
          type: 'BadRequestError',
          param: null,
          code: 400,
        }),
    ],
    [
      'fastapi',
      422,
      (body: unknown) =>
        expect(body).toEqual({
          detail: [
            {
              type: 'extra_forbidden',
              loc: ['body', 'prompt_cache_key'],
              msg: 'Extra inputs are not permitted',
              input: 'k',
            },
          ],
        }),
    ],
  ] as const)('refuses in the %s body, which the SDK reports with no body', async (shape, status, check) => {
    await fake.stop();
    fake = await startFakeOpenAI({
      rejectUnknownFields: ['prompt_cache_key'],
      refusalShape: shape,
      replies: [{ kind: 'message', content: 'in' }],
    });
    client = new OpenAI({ apiKey: 'test', baseURL: fake.baseURL, maxRetries: 0 });

    const raw = await fetch(`${fake.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer test' },
      body: JSON.stringify({ model: MODEL, messages, prompt_cache_key: 'k' }),
    });
    expect(raw.status).toBe(status);
    check(await raw.json());
    const error = await errorOf(
      client.chat.completions.create({ model: MODEL, messages, prompt_cache_key: 'k' }),
    );
    expect((error as InstanceType<typeof OpenAI.APIError>).status).toBe(status);
    expect((error as Error).message).toBe(`${status} status code (no body)`);
    const plain = await client.chat.completions.create({ model: MODEL, messages });
    expect(plain.choices[0]?.message.content).toBe('in');
  });

  it('maps finishReason length through', async () => {
    fake.enqueue({ kind: 'message', content: 'cut sh', finishReason: 'length' });

    const completion = await client.chat.completions.create({ model: MODEL, messages });

    expect(completion.choices[0]?.finish_reason).toBe('length');
  });
});

async function waitFor(condition: () => boolean, timeoutMs = 2000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
