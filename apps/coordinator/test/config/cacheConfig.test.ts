import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ModelProvider } from '@troupe/llm';
import { type FakeModelServer, startFakeAnthropic, startFakeOpenAI } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { builtinTools } from '../../src/config/builtinTools.ts';
import { ConfigError } from '../../src/config/configError.ts';
import { loadPipeline, parsePipeline } from '../../src/config/loadPipeline.ts';
import { cacheSettingOf, createProvider, resolveModelRef } from '../../src/config/modelFactory.ts';
import { pipelineJsonSchema } from '../../src/config/pipelineJsonSchema.ts';
import type { ModelConfig, PipelineConfig } from '../../src/config/pipelineSchema.ts';

const toolNames = builtinTools().names();
const FILE = 'pipeline.yaml';

/** A pipeline whose model entry `m` ends with `entry` (YAML flow-map members), and `extra` at the top level. */
const pipeline = (entry: string, extra = '') => `version: 1
name: demo
models:
  m: { provider: anthropic, model: claude-sonnet-4-6${entry} }
${extra}defaults: { model: m }
agents:
  worker: { instructions: Do the work. }
flow:
  - { id: work, kind: agent, agent: worker }
`;

const parse = (text: string): PipelineConfig => parsePipeline(text, FILE, { toolNames });

function refusal(text: string): ConfigError {
  try {
    parse(text);
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  return expect.fail('the pipeline was accepted');
}

const remote = (config: PipelineConfig, ref = 'm') => {
  const entry = resolveModelRef(config, ref);
  if (!entry || entry.provider === 'scripted') throw new Error(`test setup: ${ref} is not a remote model`);
  return entry;
};

describe('models.<name>.cache', () => {
  it('is auto when absent, for an entry and for an inline openai:/anthropic: model', () => {
    const config = parse(pipeline(''));
    expect(remote(config).cache).toBeUndefined();
    expect(cacheSettingOf(remote(config))).toBe('auto');
    expect(cacheSettingOf(remote(config, 'anthropic:claude-haiku-4-5'))).toBe('auto');
  });

  it.each([
    ['auto', 'auto'],
    ['off', 'off'],
    ['{ ttl: 5m }', { ttl: '5m' }],
    ['{ ttl: 1h }', { ttl: '1h' }],
  ])('takes cache: %s', (written, setting) => {
    expect(cacheSettingOf(remote(parse(pipeline(`, cache: ${written}`))))).toEqual(setting);
  });

  it('takes it on openai and openai-compatible entries too', () => {
    const text = pipeline('').replace(
      'models:\n',
      'models:\n  o: { provider: openai, model: gpt-5-mini, cache: off }\n' +
        '  l: { provider: openai-compatible, model: llama, baseURL: "http://127.0.0.1:1/v1", cache: { ttl: 1h } }\n',
    );
    const config = parse(text);
    expect(cacheSettingOf(remote(config, 'o'))).toBe('off');
    expect(cacheSettingOf(remote(config, 'l'))).toEqual({ ttl: '1h' });
  });

  it('gives the provider the lifetime only, not the x- keys written beside it', () => {
    const config = parse(pipeline(', cache: { ttl: 1h, x-why: "people answer slowly" }'));
    expect(remote(config).cache).toMatchObject({ ttl: '1h', 'x-why': 'people answer slowly' });
    expect(cacheSettingOf(remote(config))).toEqual({ ttl: '1h' });
  });

  it.each([
    [
      'on',
      '"on" is not a cache setting (did you mean "auto"?); use auto (the default), off, { ttl: 5m } or { ttl: 1h }',
    ],
    ['true', 'true is not a cache setting (did you mean "auto"?)'],
    ['false', 'false is not a cache setting (did you mean "off"?)'],
    ['of', '"of" is not a cache setting (did you mean "off"?)'],
    ['atuo', '"atuo" is not a cache setting (did you mean "auto"?)'],
    ['1h', '"1h" is not a cache setting (did you mean { ttl: 1h }?)'],
    ['{ ttl: 10m }', 'ttl "10m" is not a cache lifetime; use 5m (the providers\' default) or 1h'],
    ['{ ttl: 3600 }', "ttl 3600 is not a cache lifetime; use 5m (the providers' default) or 1h"],
    ['{}', 'missing ttl: write { ttl: 5m } or { ttl: 1h }, or cache: auto | off'],
  ])('refuses cache: %s, at its line, saying what to write', (written, message) => {
    const text = pipeline(`, cache: ${written}`);
    const error = refusal(text);
    expect(error.issues).toHaveLength(1);
    expect(error.issues[0]).toMatchObject({ path: 'models.m.cache', line: 4 });
    expect(error.issues[0]?.message).toContain(message);
    expect(error.message).toContain(`${FILE}:4:`);
  });

  it('refuses an unknown key in the object, naming the one meant', () => {
    const error = refusal(pipeline(', cache: { ttl: 1h, tll: 5m }'));
    expect(error.issues).toEqual([
      expect.objectContaining({
        path: 'models.m.cache.tll',
        message: 'unknown key "tll" (did you mean "ttl"?); allowed: ttl; custom keys must start with "x-"',
      }),
    ]);
  });

  it('is refused on a scripted model, which has no cache', () => {
    const text = pipeline('').replace(
      'm: { provider: anthropic, model: claude-sonnet-4-6 }',
      'm: { provider: scripted, script: ./s.yaml, cache: off }',
    );
    expect(refusal(text).issues).toEqual([
      expect.objectContaining({
        path: 'models.m.cache',
        message: expect.stringContaining('unknown key "cache"'),
      }),
    ]);
  });

  it('is in the JSON Schema for editors: auto, off or { ttl: 5m | 1h } and nothing else', () => {
    const schema = pipelineJsonSchema() as {
      properties: { models: { additionalProperties: { oneOf?: unknown[]; anyOf?: unknown[] } } };
    };
    const entries = JSON.stringify(schema.properties.models.additionalProperties);
    expect(entries).toContain('"cache":{"anyOf":[{"type":"string","enum":["auto","off"]}');
    expect(entries).toContain('"ttl":{"type":"string","enum":["5m","1h"]}');
  });
});

describe('prices.<provider:model>.cacheWrite and cacheWrite1h', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'troupe-cache-prices-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('reach the price table the pipeline’s calls are priced with', async () => {
    const file = join(dir, 'prices.yaml');
    await writeFile(
      file,
      pipeline(
        '',
        'prices:\n  "anthropic:claude-sonnet-4-6": { input: 3, output: 15, cachedInput: 0.3, cacheWrite: 3.75, cacheWrite1h: 6 }\n',
      ),
    );
    const loaded = await loadPipeline(file, { toolNames, requireKeys: false });
    expect(loaded.prices.priceOf('anthropic', 'claude-sonnet-4-6')).toEqual({
      input: 3,
      output: 15,
      cachedInput: 0.3,
      cacheWrite: 3.75,
      cacheWrite1h: 6,
    });
  });

  it('refuses a negative price and an unknown price key', () => {
    const error = refusal(
      pipeline(
        '',
        'prices:\n  "anthropic:claude-sonnet-4-6": { input: 3, output: 15, cacheWrite: -1, cacheWrites1h: 6 }\n',
      ),
    );
    expect(error.issues.map((i) => i.path).sort()).toEqual([
      'prices.anthropic:claude-sonnet-4-6.cacheWrite',
      'prices.anthropic:claude-sonnet-4-6.cacheWrites1h',
    ]);
    expect(error.message).toContain('unknown key "cacheWrites1h" (did you mean "cacheWrite1h"?)');
  });
});

describe('createProvider: the entry’s cache setting at the wire', () => {
  let anthropic: FakeModelServer;
  let openai: FakeModelServer;
  beforeAll(async () => {
    [anthropic, openai] = await Promise.all([startFakeAnthropic(), startFakeOpenAI()]);
  });
  afterAll(async () => {
    await Promise.all([anthropic?.stop(), openai?.stop()]);
  });

  const noFiles = async () => expect.fail('no script is read');
  const env = { ANTHROPIC_API_KEY: 'sk-ant-test', OPENAI_API_KEY: 'sk-test' };

  /** One call of the entry's provider, as an agent's would be, and the body the fake received. */
  async function sent(fake: FakeModelServer, entry: ModelConfig): Promise<Record<string, unknown>> {
    const provider: ModelProvider = await createProvider(entry, noFiles, env);
    fake.enqueue({ kind: 'message', content: 'ok' });
    await provider.complete({
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Say ok.' },
      ],
      tools: [],
      context: { taskId: 't-1', pipeline: 'demo', agent: 'worker', stepId: 't-1.work.1' },
    });
    return fake.requests.at(-1)?.body;
  }

  const base = { timeout: 10, maxAttempts: 1, retryDelay: 0 };

  it('anthropic off: no breakpoint and the system prompt a string; { ttl: 1h }: every breakpoint an hour', async () => {
    const entry = {
      provider: 'anthropic',
      model: 'claude-sonnet-4-6',
      baseURL: anthropic.baseURL,
      ...base,
    } as const;
    const off = await sent(anthropic, { ...entry, cache: 'off' });
    expect(JSON.stringify(off)).not.toContain('cache_control');
    expect(off.system).toBe('Be brief.');
    const hour = await sent(anthropic, { ...entry, cache: { ttl: '1h' } });
    expect(hour.system).toEqual([
      { type: 'text', text: 'Be brief.', cache_control: { type: 'ephemeral', ttl: '1h' } },
    ]);
  });

  it('openai: a prompt_cache_key when absent (auto), none when off', async () => {
    const entry = { provider: 'openai', model: 'gpt-5-mini', baseURL: openai.baseURL, ...base } as const;
    expect((await sent(openai, entry)).prompt_cache_key).toBe('troupe:demo:worker');
    expect(await sent(openai, { ...entry, cache: 'off' })).not.toHaveProperty('prompt_cache_key');
  });
});
