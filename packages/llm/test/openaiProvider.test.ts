import { type FakeModelServer, type FakeReply, startFakeOpenAI } from '@troupe/testkit';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ModelError } from '../src/errors.ts';
import { OpenAIProvider, type OpenAIProviderOptions } from '../src/openai/openaiProvider.ts';
import type { ModelDelta, ModelRequest, ToolDefinition } from '../src/types.ts';

let fake: FakeModelServer;

beforeEach(async () => {
  fake = await startFakeOpenAI();
});

afterEach(async () => {
  await fake.stop();
});

const provider = (options: Partial<OpenAIProviderOptions> = {}) =>
  new OpenAIProvider({ model: 'gpt-test', apiKey: 'sk-test', baseURL: fake.baseURL, ...options });

const readFile: ToolDefinition = {
  name: 'read_file',
  description: 'Read a file of the workspace.',
  parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
};

const request = (extra: Partial<ModelRequest> = {}): ModelRequest => ({
  messages: [
    { role: 'system', content: 'You are a careful coder.' },
    { role: 'user', content: 'Write notes/hello.md.' },
  ],
  tools: [],
  context: { taskId: 't1', pipeline: 'demo', agent: 'coder', stepId: 't1.code.1' },
  ...extra,
});

const toolReply: FakeReply = {
  kind: 'message',
  content: 'Reading the notes folder before writing anything.',
  toolCalls: [
    { id: 'call_a', name: 'read_file', arguments: '{"path":"notes/hello.md"}' },
    { id: 'call_b', name: 'read_file', arguments: '{"path":"notes/todo-list-for-today.md"}' },
  ],
  usage: { inputTokens: 120, outputTokens: 35, cachedTokens: 64 },
};

async function rejection(promise: Promise<unknown>): Promise<ModelError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ModelError);
  return error as ModelError;
}

describe('OpenAIProvider.complete', () => {
  it('names its provider and model', () => {
    expect(provider().provider).toBe('openai');
    expect(provider({ provider: 'openai-compatible' }).provider).toBe('openai-compatible');
    expect(provider().model).toBe('gpt-test');
  });

  it('returns the reply normalized: content, tool calls, usage, finish reason, model, provider', async () => {
    fake.enqueue(toolReply);
    const response = await provider().complete(request({ tools: [readFile] }));
    expect(response).toEqual({
      content: 'Reading the notes folder before writing anything.',
      toolCalls: [
        { id: 'call_a', name: 'read_file', arguments: '{"path":"notes/hello.md"}' },
        { id: 'call_b', name: 'read_file', arguments: '{"path":"notes/todo-list-for-today.md"}' },
      ],
      usage: { inputTokens: 120, outputTokens: 35, cachedTokens: 64 },
      finishReason: 'tool_calls',
      model: 'gpt-test',
      provider: 'openai',
    });
  });

  it('reports the model the server says answered', async () => {
    await fake.stop();
    fake = await startFakeOpenAI({ model: 'gpt-test-2025-08-07' });
    fake.enqueue({ kind: 'message', content: 'hi' });
    const response = await provider().complete(request());
    expect(response.model).toBe('gpt-test-2025-08-07');
  });

  it('gives empty content, no tool calls and a stop for a plain empty reply', async () => {
    fake.enqueue({ kind: 'message', content: '', usage: { inputTokens: 3, outputTokens: 0 } });
    const response = await provider().complete(request());
    expect(response.content).toBe('');
    expect(response.toolCalls).toEqual([]);
    expect(response.finishReason).toBe('stop');
    expect(response.usage).toEqual({ inputTokens: 3, outputTokens: 0, cachedTokens: 0 });
  });

  it('maps a length finish', async () => {
    fake.enqueue({ kind: 'message', content: 'cut sh', finishReason: 'length' });
    expect((await provider().complete(request())).finishReason).toBe('length');
  });

  it('sends the model, messages, tools and temperature in the request body', async () => {
    fake.enqueue({ kind: 'message', content: 'ok' });
    await provider().complete(
      request({
        tools: [readFile],
        temperature: 0.2,
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'go' },
          { role: 'assistant', content: '', toolCalls: [{ id: 'c1', name: 'read_file', arguments: '{}' }] },
          { role: 'tool', toolCallId: 'c1', name: 'read_file', content: 'missing', isError: true },
        ],
      }),
    );
    expect(fake.requests).toHaveLength(1);
    const body = fake.requests[0]?.body;
    expect(fake.requests[0]?.path).toBe('/v1/chat/completions');
    expect(body.model).toBe('gpt-test');
    expect(body.temperature).toBe(0.2);
    expect(body.messages).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'go' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'c1', type: 'function', function: { name: 'read_file', arguments: '{}' } }],
      },
      { role: 'tool', tool_call_id: 'c1', content: 'Error: missing' },
    ]);
    expect(body.tools).toEqual([
      {
        type: 'function',
        function: { name: 'read_file', description: readFile.description, parameters: readFile.parameters },
      },
    ]);
    expect(body.stream).toBeUndefined();
    expect(body.response_format).toBeUndefined();
  });

  it('sends no tools, temperature or token cap when the request has none', async () => {
    fake.enqueue({ kind: 'message', content: 'ok' });
    await provider().complete(request());
    const body = fake.requests[0]?.body;
    expect(body).not.toHaveProperty('tools');
    expect(body).not.toHaveProperty('temperature');
    expect(body).not.toHaveProperty('max_tokens');
    expect(body).not.toHaveProperty('max_completion_tokens');
  });

  it('sends maxTokens as max_completion_tokens to OpenAI', async () => {
    fake.enqueue({ kind: 'message', content: 'ok' });
    await provider().complete(request({ maxTokens: 256 }));
    const body = fake.requests[0]?.body;
    expect(body.max_completion_tokens).toBe(256);
    expect(body).not.toHaveProperty('max_tokens');
  });

  it('sends maxTokens as max_tokens to an OpenAI-compatible server', async () => {
    fake.enqueue({ kind: 'message', content: 'ok' });
    const response = await provider({ provider: 'openai-compatible' }).complete(request({ maxTokens: 256 }));
    const body = fake.requests[0]?.body;
    expect(body.max_tokens).toBe(256);
    expect(body).not.toHaveProperty('max_completion_tokens');
    expect(response.provider).toBe('openai-compatible');
  });

  it('asks for a structured reply with response_format and returns the JSON as content', async () => {
    const schema = {
      type: 'object',
      properties: { verdict: { type: 'string' } },
      required: ['verdict'],
    };
    fake.enqueue({ kind: 'message', content: '{"verdict":"approve"}' });
    const response = await provider().complete(request({ responseSchema: { name: 'review', schema } }));
    expect(fake.requests[0]?.body.response_format).toEqual({
      type: 'json_schema',
      json_schema: { name: 'review', schema, strict: false },
    });
    expect(response.content).toBe('{"verdict":"approve"}');
    expect(response.toolCalls).toEqual([]);
  });
});

describe('OpenAIProvider streaming', () => {
  it('returns the same response streamed as not', async () => {
    fake.enqueue(toolReply, toolReply);
    const plain = await provider().complete(request({ tools: [readFile] }));
    const streamed = await provider().complete(request({ tools: [readFile], stream: true }));
    expect(fake.requests[1]?.body.stream).toBe(true);
    expect(fake.requests[1]?.body.stream_options).toEqual({ include_usage: true });
    expect(streamed).toEqual(plain);
  });

  it('passes text and tool-call pieces to onDelta, and they join to the final values', async () => {
    fake.enqueue(toolReply);
    const deltas: ModelDelta[] = [];
    const response = await provider().complete(
      request({ tools: [readFile], stream: true, observer: { onDelta: (d) => deltas.push(d) } }),
    );

    const texts = deltas.flatMap((d) => (d.type === 'text' ? [d.text] : []));
    expect(texts.length).toBeGreaterThan(1);
    expect(texts.join('')).toBe(response.content);

    const calls = new Map<number, { id: string; name: string; arguments: string }>();
    for (const delta of deltas) {
      if (delta.type !== 'tool_call') continue;
      const call = calls.get(delta.index) ?? { id: '', name: '', arguments: '' };
      if (delta.id !== undefined) call.id = delta.id;
      if (delta.name !== undefined) call.name += delta.name;
      call.arguments += delta.arguments;
      calls.set(delta.index, call);
    }
    expect([...calls.keys()]).toEqual([0, 1]);
    expect([...calls.values()]).toEqual(response.toolCalls);
    expect(deltas.filter((d) => d.type === 'tool_call').length).toBeGreaterThan(2);
  });

  it('streams a structured reply as text', async () => {
    fake.enqueue({ kind: 'message', content: '{"verdict":"request changes"}' });
    const deltas: ModelDelta[] = [];
    const response = await provider().complete(
      request({
        stream: true,
        responseSchema: { name: 'review', schema: { type: 'object' } },
        observer: { onDelta: (d) => deltas.push(d) },
      }),
    );
    expect(response.content).toBe('{"verdict":"request changes"}');
    expect(deltas.every((d) => d.type === 'text')).toBe(true);
    expect(fake.requests[0]?.body.response_format?.type).toBe('json_schema');
  });
});

describe('OpenAIProvider failures', () => {
  it('turns a 429 into rate_limited with the retry-after it was given', async () => {
    fake.enqueue({
      kind: 'error',
      status: 429,
      message: 'Rate limit reached',
      headers: { 'retry-after': '7' },
    });
    const error = await rejection(provider().complete(request()));
    expect(error.code).toBe('rate_limited');
    expect(error.retryable).toBe(true);
    expect(error.status).toBe(429);
    expect(error.retryAfterMs).toBe(7_000);
    expect(error.message).toContain('Rate limit reached');
    expect(error.message.startsWith('openai gpt-test: ')).toBe(true);
  });

  it('turns a 401 into auth, not retryable', async () => {
    await fake.stop();
    fake = await startFakeOpenAI({ requireApiKey: 'sk-right' });
    const error = await rejection(provider({ apiKey: 'sk-wrong' }).complete(request()));
    expect(error.code).toBe('auth');
    expect(error.retryable).toBe(false);
    expect(error.status).toBe(401);
  });

  it('turns a 400 into bad_request, not retryable', async () => {
    fake.enqueue({ kind: 'error', status: 400, message: "Invalid 'messages': empty", param: 'messages' });
    const error = await rejection(provider().complete(request()));
    expect(error.code).toBe('bad_request');
    expect(error.retryable).toBe(false);
  });

  it('turns a server that never answers into timeout after timeoutMs', async () => {
    fake.enqueue({ kind: 'hang' });
    const started = Date.now();
    const error = await rejection(provider({ timeoutMs: 200 }).complete(request()));
    expect(error.code).toBe('timeout');
    expect(error.retryable).toBe(true);
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(fake.requests).toHaveLength(1);
  });

  it('turns a reset connection into connection, retryable', async () => {
    fake.enqueue({ kind: 'reset' });
    const error = await rejection(provider().complete(request()));
    expect(error.code).toBe('connection');
    expect(error.retryable).toBe(true);
    // Which server was tried is the first question when no answer came.
    expect(error.message).toContain(`connection to ${fake.baseURL.replace(/\/$/, '')} failed`);
  });

  it('turns a body that is not JSON into invalid_response, retryable', async () => {
    fake.enqueue({ kind: 'garbage' });
    const error = await rejection(provider().complete(request()));
    expect(error.code).toBe('invalid_response');
    expect(error.retryable).toBe(true);
  });

  it('turns a stream that is not JSON into invalid_response, retryable', async () => {
    fake.enqueue({ kind: 'garbage' });
    const error = await rejection(provider().complete(request({ stream: true })));
    expect(error.code).toBe('invalid_response');
    expect(error.retryable).toBe(true);
  });

  it('turns an aborted signal into aborted', async () => {
    fake.enqueue({ kind: 'hang' });
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 50);
    const error = await rejection(provider().complete(request({ signal: controller.signal })));
    expect(error.code).toBe('aborted');
    expect(error.retryable).toBe(false);
  });

  it.each([
    ['a 500', { kind: 'error', status: 500 }, 'server_error'],
    ['a 429', { kind: 'error', status: 429, headers: { 'retry-after': '0' } }, 'rate_limited'],
    ['a reset', { kind: 'reset' }, 'connection'],
    ['garbage', { kind: 'garbage' }, 'invalid_response'],
  ] as const)('makes exactly one request on %s: retries are the caller’s', async (_what, reply, code) => {
    fake.enqueue(reply, { kind: 'message', content: 'a retry would get this' });
    const error = await rejection(provider().complete(request()));
    expect(error.code).toBe(code);
    expect(fake.requests).toHaveLength(1);
  });
});
