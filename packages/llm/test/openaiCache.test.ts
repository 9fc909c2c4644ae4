import { type FakeModelServer, type FakeReply, startFakeOpenAI } from '@troupe/testkit';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ModelError } from '../src/errors.ts';
import { OpenAIProvider, type OpenAIProviderOptions } from '../src/openai/openaiProvider.ts';
import type { ModelRequest, ToolDefinition } from '../src/types.ts';

let fake: FakeModelServer | undefined;

afterEach(async () => {
  await fake?.stop();
  fake = undefined;
  vi.restoreAllMocks();
});

async function start(options: Parameters<typeof startFakeOpenAI>[0] = {}): Promise<FakeModelServer> {
  fake = await startFakeOpenAI(options);
  return fake;
}

const provider = (server: FakeModelServer, options: Partial<OpenAIProviderOptions> = {}) =>
  new OpenAIProvider({ model: 'gpt-test', apiKey: 'sk-test', baseURL: server.baseURL, ...options });

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
  tools: [readFile],
  context: { taskId: 't1', pipeline: 'demo', agent: 'coder', stepId: 't1.code.1' },
  ...extra,
});

const ok: FakeReply = { kind: 'message', content: 'ok' };

const bodies = (server: FakeModelServer) => server.requests.map((r) => r.body);

describe('OpenAIProvider prompt cache key', () => {
  it.each([['openai'], ['openai-compatible']] as const)(
    'sends prompt_cache_key troupe:<pipeline>:<agent> by default (%s)',
    async (kind) => {
      const server = await start({ replies: [ok, ok] });
      await provider(server, { provider: kind }).complete(request());
      await provider(server, { provider: kind }).complete(request({ stream: true }));
      for (const body of bodies(server)) {
        expect(body.prompt_cache_key).toBe('troupe:demo:coder');
        expect(body).not.toHaveProperty('prompt_cache_retention');
      }
    },
  );

  it('keys each pipeline agent apart, and every call of one agent alike', async () => {
    const server = await start({ replies: [ok, ok, ok] });
    const model = provider(server);
    const context = request().context;
    await model.complete(request());
    await model.complete(request({ context: { ...context, taskId: 't2', stepId: 't2.code.1' } }));
    await model.complete(request({ context: { ...context, agent: 'reviewer' } }));
    expect(bodies(server).map((b) => b.prompt_cache_key)).toEqual([
      'troupe:demo:coder',
      'troupe:demo:coder',
      'troupe:demo:reviewer',
    ]);
  });

  it('hashes a key longer than the 64 characters the API takes, stable and distinct per agent', async () => {
    const server = await start({ replies: [ok, ok, ok] });
    const pipeline = 'a-pipeline-with-a-rather-long-and-descriptive-name-for-its-team';
    const context = { ...request().context, pipeline };
    await provider(server).complete(request({ context: { ...context, agent: 'implementer' } }));
    await provider(server).complete(request({ context: { ...context, agent: 'implementer' } }));
    await provider(server).complete(request({ context: { ...context, agent: 'reviewer' } }));
    const [first, again, other] = bodies(server).map((b) => b.prompt_cache_key as string);
    expect(first?.length).toBeLessThanOrEqual(64);
    expect(first).toMatch(/^troupe:[0-9a-f]+$/);
    expect(again).toBe(first);
    expect(other).not.toBe(first);
    expect(other?.length).toBeLessThanOrEqual(64);
  });
});

describe('OpenAIProvider prompt cache retention', () => {
  it('asks openai for 24-hour retention when the entry says ttl 1h', async () => {
    const server = await start({ replies: [ok, ok] });
    await provider(server, { cache: { ttl: '1h' } }).complete(request());
    await provider(server, { cache: { ttl: '1h' } }).complete(request({ stream: true }));
    for (const body of bodies(server)) {
      expect(body.prompt_cache_key).toBe('troupe:demo:coder');
      expect(body.prompt_cache_retention).toBe('24h');
    }
  });

  it('does not ask for it on a request hint alone, with ttl 5m, or from a compatible server', async () => {
    const server = await start({ replies: [ok, ok, ok] });
    await provider(server).complete(request({ cache: { ttl: '1h' } }));
    await provider(server, { cache: { ttl: '5m' } }).complete(request({ cache: { ttl: '1h' } }));
    await provider(server, { provider: 'openai-compatible', cache: { ttl: '1h' } }).complete(request());
    for (const body of bodies(server)) {
      expect(body.prompt_cache_key).toBe('troupe:demo:coder');
      expect(body).not.toHaveProperty('prompt_cache_retention');
    }
  });
});

describe('OpenAIProvider cache: off', () => {
  it('sends no cache field, even with an hour hinted, and otherwise the body caching sends', async () => {
    const server = await start({ replies: [ok, ok] });
    await provider(server, { cache: 'off' }).complete(request({ cache: { ttl: '1h' } }));
    await provider(server, { cache: { ttl: '1h' } }).complete(request({ cache: { ttl: '1h' } }));
    const [off, on] = bodies(server);
    expect(off).not.toHaveProperty('prompt_cache_key');
    expect(off).not.toHaveProperty('prompt_cache_retention');
    expect(on.prompt_cache_key).toBe('troupe:demo:coder');
    const { prompt_cache_key: _key, prompt_cache_retention: _retention, ...rest } = on;
    expect(rest).toEqual(off);
  });
});

describe('OpenAIProvider with a server that refuses the cache fields', () => {
  it.each([
    ['plain', false],
    ['streamed', true],
  ])('asks again without them, answers, and sends none from then on (%s)', async (_what, stream) => {
    const server = await start({ rejectUnknownFields: ['prompt_cache_key'], replies: [ok, ok] });
    const warnings: string[] = [];
    const model = provider(server, { provider: 'openai-compatible', onWarning: (w) => warnings.push(w) });

    const first = await model.complete(request({ stream }));
    expect(first.content).toBe('ok');
    expect(bodies(server).map((b) => 'prompt_cache_key' in b)).toEqual([true, false]);
    const [refused, retried] = bodies(server);
    const { prompt_cache_key: _key, ...rest } = refused;
    expect(retried).toEqual(rest);

    const second = await model.complete(request({ stream }));
    expect(second.content).toBe('ok');
    expect(server.requests).toHaveLength(3);
    expect(bodies(server)[2]).not.toHaveProperty('prompt_cache_key');

    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain('openai-compatible gpt-test');
    expect(warnings[0]).toContain('refused the prompt-cache field prompt_cache_key (HTTP 400)');
    expect(warnings[0]).toContain('cache: off');
  });

  it('drops only the retention when the server names only that field, and keeps sending the key', async () => {
    const server = await start({ rejectUnknownFields: ['prompt_cache_retention'], replies: [ok, ok] });
    const warnings: string[] = [];
    const model = provider(server, { cache: { ttl: '1h' }, onWarning: (w) => warnings.push(w) });
    expect((await model.complete(request())).content).toBe('ok');
    expect((await model.complete(request())).content).toBe('ok');
    const [refused, retried, later] = bodies(server);
    expect(refused.prompt_cache_retention).toBe('24h');
    for (const body of [retried, later]) {
      expect(body.prompt_cache_key).toBe('troupe:demo:coder');
      expect(body).not.toHaveProperty('prompt_cache_retention');
    }
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain('refused the prompt-cache field prompt_cache_retention (HTTP 400)');
    expect(warnings[0]).toContain('ttl: 1h');
  });

  it.each([
    ['vllm-legacy', 'plain', false],
    ['vllm-legacy', 'streamed', true],
    ['fastapi', 'plain', false],
    ['fastapi', 'streamed', true],
  ] as const)(
    'takes a refusal whose body the SDK cannot read (%s, %s) as one of the cache fields',
    async (shape, _what, stream) => {
      const server = await start({
        rejectUnknownFields: ['prompt_cache_key', 'prompt_cache_retention'],
        refusalShape: shape,
        replies: [ok, ok],
      });
      const warnings: string[] = [];
      const model = provider(server, { cache: { ttl: '1h' }, onWarning: (w) => warnings.push(w) });

      expect((await model.complete(request({ stream }))).content).toBe('ok');
      expect((await model.complete(request({ stream }))).content).toBe('ok');
      const [refused, retried, later] = bodies(server);
      expect(refused).toMatchObject({ prompt_cache_key: 'troupe:demo:coder', prompt_cache_retention: '24h' });
      const { prompt_cache_key: _key, prompt_cache_retention: _retention, ...rest } = refused;
      expect(retried).toEqual(rest);
      expect(later).toEqual(rest);
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toContain(
        `refused a request with the prompt-cache fields prompt_cache_key and prompt_cache_retention (HTTP ${shape === 'fastapi' ? 422 : 400}, naming no field) and took the request without them; its calls are sent without them from now on.`,
      );
    },
  );

  it('recognizes a scripted 400 whose message names the field, as such servers answer', async () => {
    const server = await start({
      replies: [
        { kind: 'error', status: 400, message: 'Unrecognized request argument supplied: prompt_cache_key' },
        ok,
      ],
    });
    const model = provider(server, { provider: 'openai-compatible', onWarning: () => {} });
    expect((await model.complete(request())).content).toBe('ok');
    expect(bodies(server).map((b) => 'prompt_cache_key' in b)).toEqual([true, false]);
  });

  it('warns through process.emitWarning when no onWarning is given', async () => {
    const emitted = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    const server = await start({ rejectUnknownFields: ['prompt_cache_key'], replies: [ok] });
    await provider(server, { provider: 'openai-compatible' }).complete(request());
    expect(emitted).toHaveBeenCalledTimes(1);
    expect(String(emitted.mock.calls[0]?.[0])).toContain('refused the prompt-cache field prompt_cache_key');
  });

  it('does not ask again on a 400 that names another parameter, and keeps sending the key', async () => {
    const server = await start({
      replies: [
        {
          kind: 'error',
          status: 400,
          message: 'This model maximum context length is 8192 tokens',
          param: 'messages',
        },
        ok,
      ],
    });
    const warnings: string[] = [];
    const model = provider(server, { provider: 'openai-compatible', onWarning: (w) => warnings.push(w) });
    const error = await model.complete(request()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ModelError);
    expect((error as ModelError).code).toBe('bad_request');
    expect(server.requests).toHaveLength(1);
    await model.complete(request());
    expect(bodies(server)[1]?.prompt_cache_key).toBe('troupe:demo:coder');
    expect(warnings).toEqual([]);
  });

  it.each([
    ['plain', false],
    ['streamed', true],
  ])(
    'fails with the first error, plainly, when a 400 naming nothing comes again without the fields (%s)',
    async (_what, stream) => {
      const server = await start({
        replies: [
          { kind: 'error', status: 400, message: 'This model maximum context length is 8192 tokens' },
          { kind: 'error', status: 400, message: 'still too long' },
          ok,
        ],
      });
      const warnings: string[] = [];
      const model = provider(server, { provider: 'openai-compatible', onWarning: (w) => warnings.push(w) });
      const error = (await model.complete(request({ stream })).catch((e: unknown) => e)) as ModelError;
      expect(error).toBeInstanceOf(ModelError);
      expect(error.code).toBe('bad_request');
      expect(error.message).toBe(
        'openai-compatible gpt-test: 400 This model maximum context length is 8192 tokens',
      );
      expect(bodies(server).map((b) => 'prompt_cache_key' in b)).toEqual([true, false]);
      await model.complete(request({ stream }));
      expect(bodies(server)[2]?.prompt_cache_key).toBe('troupe:demo:coder');
      expect(warnings).toEqual([]);
    },
  );

  it('fails with the second answer when the request without cache fields fails too', async () => {
    const server = await start({
      replies: [
        { kind: 'error', status: 400, message: 'Unknown parameter: prompt_cache_key' },
        { kind: 'error', status: 500, message: 'the model crashed' },
      ],
    });
    const model = provider(server, { provider: 'openai-compatible', onWarning: () => {} });
    const error = (await model.complete(request()).catch((e: unknown) => e)) as ModelError;
    expect(error.code).toBe('server_error');
    expect(error.message).toContain('the model crashed');
    expect(server.requests).toHaveLength(2);
  });
});
