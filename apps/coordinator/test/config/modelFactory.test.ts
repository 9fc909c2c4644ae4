import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { captureLogger, type FakeModelServer, startFakeOpenAI } from '@troupe/testkit';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { loadPipeline } from '../../src/config/loadPipeline.ts';
import { createProvider } from '../../src/config/modelFactory.ts';
import type { ModelConfig } from '../../src/config/pipelineSchema.ts';

let fake: FakeModelServer | undefined;

afterEach(async () => {
  await fake?.stop();
  fake = undefined;
  vi.restoreAllMocks();
});

const noFiles = async () => expect.fail('no script is read');

/** One call of a strict compatible server's entry, which refuses prompt_cache_key. */
async function callStrictServer(logger?: ReturnType<typeof captureLogger>['logger']): Promise<void> {
  fake = await startFakeOpenAI({
    rejectUnknownFields: ['prompt_cache_key'],
    replies: [{ kind: 'message', content: 'ok' }],
  });
  const entry: ModelConfig = {
    provider: 'openai-compatible',
    model: 'llama3.1',
    baseURL: fake.baseURL,
    timeout: 10,
    maxAttempts: 1,
    retryDelay: 0,
  };
  const provider = await createProvider(entry, noFiles, {}, logger);
  const reply = await provider.complete({
    messages: [{ role: 'user', content: 'Say ok.' }],
    tools: [],
    context: { taskId: 't-1', pipeline: 'demo', agent: 'worker', stepId: 't-1.work.1' },
  });
  expect(reply.content).toBe('ok');
}

describe('createProvider: a provider’s warnings', () => {
  it('go to the logger it is given, naming the model, and not to process warnings', async () => {
    const emitted = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    const { logger, lines } = captureLogger();
    await callStrictServer(logger);
    const warnings = lines.filter((line) => line.level === 40);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]?.model).toBe('openai-compatible:llama3.1');
    expect(warnings[0]?.msg).toContain('refused the prompt-cache field prompt_cache_key');
    expect(emitted).not.toHaveBeenCalled();
  });

  it('are a process warning without a logger', async () => {
    const emitted = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    await callStrictServer();
    expect(emitted).toHaveBeenCalledTimes(1);
  });
});

describe('loadPipeline: its models’ warnings', () => {
  it('go to the logger the load is given', async () => {
    const emitted = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    fake = await startFakeOpenAI({
      rejectUnknownFields: ['prompt_cache_key'],
      replies: [{ kind: 'message', content: 'ok' }],
    });
    const dir = await mkdtemp(join(tmpdir(), 'troupe-model-warnings-'));
    try {
      const file = join(dir, 'demo.yaml');
      await writeFile(
        file,
        `version: 1
name: demo
models:
  local: { provider: openai-compatible, model: llama3.1, baseURL: "${fake.baseURL}", maxAttempts: 1 }
defaults: { model: local }
agents:
  worker: { instructions: Say ok. }
flow:
  - { id: work, kind: agent, agent: worker }
`,
      );
      const { logger, lines } = captureLogger();
      const loaded = await loadPipeline(file, { toolNames: [], logger });
      const model = loaded.agentModels.get('worker');
      await model?.complete({
        messages: [{ role: 'user', content: 'Say ok.' }],
        tools: [],
        context: { taskId: 't-1', pipeline: 'demo', agent: 'worker', stepId: 't-1.work.1' },
      });
      expect(lines.filter((line) => line.level === 40).map((line) => line.msg)).toEqual([
        expect.stringContaining('refused the prompt-cache field prompt_cache_key'),
      ]);
      expect(emitted).not.toHaveBeenCalled();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
