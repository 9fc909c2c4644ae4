import { type FakeModelServer, type FakeReply, startFakeAnthropic } from '@troupe/testkit';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AnthropicProvider, type AnthropicProviderOptions } from '../src/anthropic/anthropicProvider.ts';
import { ModelError } from '../src/errors.ts';
import type { ModelDelta, ModelRequest, ToolDefinition } from '../src/types.ts';

let fake: FakeModelServer;

beforeEach(async () => {
  fake = await startFakeAnthropic();
});

afterEach(async () => {
  await fake.stop();
});

const provider = (options: Partial<AnthropicProviderOptions> = {}) =>
  new AnthropicProvider({ model: 'claude-test', apiKey: 'sk-ant-test', baseURL: fake.baseURL, ...options });

const readFile: ToolDefinition = {
  name: 'read_file',
  description: 'Read a file of the workspace.',
  parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
};

const reviewSchema = {
  type: 'object',
  properties: { verdict: { type: 'string' } },
  required: ['verdict'],
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
    { id: 'toolu_a', name: 'read_file', arguments: '{"path":"notes/hello.md"}' },
    { id: 'toolu_b', name: 'read_file', arguments: '{"path":"notes/todo-list-for-today.md"}' },
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

describe('AnthropicProvider.complete', () => {
  it('names its provider and model', () => {
    expect(provider().provider).toBe('anthropic');
    expect(provider().model).toBe('claude-test');
  });

  it('returns the reply normalized: content, tool calls, usage, finish reason, model, provider', async () => {
    fake.enqueue(toolReply);
    const response = await provider().complete(request({ tools: [readFile] }));
    expect(response).toEqual({
      content: 'Reading the notes folder before writing anything.',
      toolCalls: [
        { id: 'toolu_a', name: 'read_file', arguments: '{"path":"notes/hello.md"}' },
        { id: 'toolu_b', name: 'read_file', arguments: '{"path":"notes/todo-list-for-today.md"}' },
      ],
      // The API counts cache reads apart from input_tokens (120 here); ours counts them in.
      usage: { inputTokens: 120 + 64, outputTokens: 35, cachedTokens: 64 },
      finishReason: 'tool_calls',
      model: 'claude-test',
      provider: 'anthropic',
    });
  });

  it('reports the model the server says answered', async () => {
    await fake.stop();
    fake = await startFakeAnthropic({ model: 'claude-test-20250929' });
    fake.enqueue({ kind: 'message', content: 'hi' });
    expect((await provider().complete(request())).model).toBe('claude-test-20250929');
  });

  it.each([
    ['stop', 'stop'],
    ['length', 'length'],
  ] as const)('maps a %s finish to %s', async (finishReason, expected) => {
    fake.enqueue({ kind: 'message', content: 'text', finishReason });
    expect((await provider().complete(request())).finishReason).toBe(expected);
  });

  it('sends the system text apart, the turns, tools, temperature and token cap', async () => {
    fake.enqueue({ kind: 'message', content: 'ok' });
    // Without cache markers (their placement is tested in anthropicCache.test.ts).
    await provider({ cache: 'off' }).complete(
      request({
        tools: [readFile],
        temperature: 0.3,
        maxTokens: 512,
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'go' },
          {
            role: 'assistant',
            content: '',
            toolCalls: [{ id: 'c1', name: 'read_file', arguments: '{"path":"a"}' }],
          },
          { role: 'tool', toolCallId: 'c1', name: 'read_file', content: 'missing', isError: true },
        ],
      }),
    );
    expect(fake.requests).toHaveLength(1);
    expect(fake.requests[0]?.path).toBe('/v1/messages');
    const body = fake.requests[0]?.body;
    expect(body.model).toBe('claude-test');
    expect(body.system).toBe('Be brief.');
    expect(body.max_tokens).toBe(512);
    expect(body.temperature).toBe(0.3);
    expect(body.messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'go' }] },
      {
        role: 'assistant',
        content: [{ type: 'tool_use', id: 'c1', name: 'read_file', input: { path: 'a' } }],
      },
      {
        role: 'user',
        content: [{ type: 'tool_result', tool_use_id: 'c1', content: 'missing', is_error: true }],
      },
    ]);
    expect(body.tools).toEqual([
      { name: 'read_file', description: readFile.description, input_schema: readFile.parameters },
    ]);
    expect(body).not.toHaveProperty('tool_choice');
  });

  it('caps output at defaultMaxTokens when the request sets none, and sends no empty system or tools', async () => {
    fake.enqueue({ kind: 'message', content: 'ok' }, { kind: 'message', content: 'ok' });
    await provider().complete(request({ messages: [{ role: 'user', content: 'hi' }] }));
    await provider({ defaultMaxTokens: 1_000 }).complete(request());
    const [first, second] = fake.requests.map((r) => r.body);
    expect(first.max_tokens).toBe(4_096);
    expect(first).not.toHaveProperty('system');
    expect(first).not.toHaveProperty('tools');
    expect(first).not.toHaveProperty('temperature');
    expect(second.max_tokens).toBe(1_000);
  });

  it('replays a tool call the fake gave malformed arguments as their raw text', async () => {
    fake.enqueue({
      kind: 'message',
      toolCalls: [{ id: 'toolu_x', name: 'read_file', arguments: '{"path": ' }],
    });
    const response = await provider().complete(request({ tools: [readFile] }));
    expect(response.content).toBe('');
    expect(response.toolCalls).toEqual([{ id: 'toolu_x', name: 'read_file', arguments: '{"path": ' }]);
  });
});

describe('AnthropicProvider structured replies', () => {
  it('forces the answer tool by name when there are no other tools, and returns its input as content', async () => {
    fake.enqueue({
      kind: 'message',
      toolCalls: [{ id: 'toolu_r', name: 'review', arguments: '{"verdict":"approve"}' }],
    });
    const response = await provider({ cache: 'off' }).complete(
      request({ responseSchema: { name: 'review', schema: reviewSchema } }),
    );
    const body = fake.requests[0]?.body;
    expect(body.tool_choice).toEqual({ type: 'tool', name: 'review' });
    expect(body.tools).toEqual([
      {
        name: 'review',
        description: expect.any(String),
        input_schema: reviewSchema,
      },
    ]);
    expect(JSON.parse(response.content)).toEqual({ verdict: 'approve' });
    expect(response.toolCalls).toEqual([]);
    expect(response.finishReason).toBe('stop');
  });

  it('asks for any tool when the agent has tools of its own, and sends them before the answer tool', async () => {
    fake.enqueue({
      kind: 'message',
      toolCalls: [{ id: 'toolu_r', name: 'review', arguments: '{"verdict":"approve"}' }],
    });
    const response = await provider().complete(
      request({ tools: [readFile], responseSchema: { name: 'review', schema: reviewSchema } }),
    );
    const body = fake.requests[0]?.body;
    expect(body.tool_choice).toEqual({ type: 'any' });
    expect(body.tools.map((t: { name: string }) => t.name)).toEqual(['read_file', 'review']);
    expect(JSON.parse(response.content)).toEqual({ verdict: 'approve' });
    expect(response.toolCalls).toEqual([]);
  });

  it('returns a call of another tool as a tool call while a structured reply is asked for', async () => {
    fake.enqueue({
      kind: 'message',
      toolCalls: [{ id: 'toolu_f', name: 'read_file', arguments: '{"path":"a.md"}' }],
    });
    const response = await provider().complete(
      request({ tools: [readFile], responseSchema: { name: 'review', schema: reviewSchema } }),
    );
    expect(response.toolCalls).toEqual([{ id: 'toolu_f', name: 'read_file', arguments: '{"path":"a.md"}' }]);
    expect(response.finishReason).toBe('tool_calls');
  });

  it('returns the same structured reply streamed as not', async () => {
    const reply: FakeReply = {
      kind: 'message',
      toolCalls: [
        { id: 'toolu_r', name: 'review', arguments: '{"verdict":"request changes","notes":[1,2]}' },
      ],
      usage: { inputTokens: 50, outputTokens: 20 },
    };
    fake.enqueue(reply, reply);
    const ask = { responseSchema: { name: 'review', schema: reviewSchema } };
    const plain = await provider().complete(request(ask));
    const streamed = await provider().complete(request({ ...ask, stream: true }));
    expect(streamed).toEqual(plain);
    expect(JSON.parse(streamed.content)).toEqual({ verdict: 'request changes', notes: [1, 2] });
  });
});

describe('AnthropicProvider streaming', () => {
  it('returns the same response streamed as not', async () => {
    fake.enqueue(toolReply, toolReply);
    const plain = await provider().complete(request({ tools: [readFile] }));
    const streamed = await provider().complete(request({ tools: [readFile], stream: true }));
    expect(fake.requests[1]?.body.stream).toBe(true);
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
    expect(calls.size).toBe(2);
    expect([...calls.values()]).toEqual(response.toolCalls);
    expect(deltas.filter((d) => d.type === 'tool_call').length).toBeGreaterThan(2);
  });

  it('gives a streamed tool call with no input the arguments {}', async () => {
    fake.enqueue({ kind: 'message', toolCalls: [{ id: 'toolu_n', name: 'list_dir', arguments: '' }] });
    const response = await provider().complete(request({ tools: [readFile], stream: true }));
    expect(response.toolCalls).toEqual([{ id: 'toolu_n', name: 'list_dir', arguments: '{}' }]);
  });
});

describe('AnthropicProvider failures', () => {
  it('turns a 429 into rate_limited with the retry-after it was given', async () => {
    fake.enqueue({
      kind: 'error',
      status: 429,
      message: 'Number of requests has exceeded your rate limit',
      headers: { 'retry-after': '4' },
    });
    const error = await rejection(provider().complete(request()));
    expect(error.code).toBe('rate_limited');
    expect(error.retryable).toBe(true);
    expect(error.status).toBe(429);
    expect(error.retryAfterMs).toBe(4_000);
    expect(error.message).toContain('exceeded your rate limit');
    expect(error.message.startsWith('anthropic claude-test: ')).toBe(true);
  });

  it('turns a 401 into auth, not retryable', async () => {
    await fake.stop();
    fake = await startFakeAnthropic({ requireApiKey: 'sk-ant-right' });
    const error = await rejection(provider({ apiKey: 'sk-ant-wrong' }).complete(request()));
    expect(error.code).toBe('auth');
    expect(error.retryable).toBe(false);
    expect(error.status).toBe(401);
  });

  it('turns a 529 overload into server_error, retryable', async () => {
    fake.enqueue({ kind: 'error', status: 529, message: 'Overloaded' });
    const error = await rejection(provider().complete(request()));
    expect(error.code).toBe('server_error');
    expect(error.retryable).toBe(true);
    expect(error.status).toBe(529);
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
