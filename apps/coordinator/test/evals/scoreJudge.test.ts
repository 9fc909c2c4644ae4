import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ScorerSpec } from '@troupe/protocol';
import { type FakeModelServer, startFakeAnthropic, startFakeOpenAI } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { builtinTools } from '../../src/config/builtinTools.ts';
import { type LoadedPipeline, loadPipeline } from '../../src/config/loadPipeline.ts';
import { makeScorers, scoreRun } from '../../src/evals/scoreCase.ts';
import { pipelineText, runOf } from './scoredRuns.ts';

const env = { OPENAI_API_KEY: 'sk-openai-test', ANTHROPIC_API_KEY: 'sk-ant-test' };
const rubric = 'The note names the version and one change.';
let dir: string;
let openai: FakeModelServer;
let anthropic: FakeModelServer;
let pipeline: LoadedPipeline;

beforeAll(async () => {
  [openai, anthropic] = await Promise.all([
    startFakeOpenAI({ requireApiKey: env.OPENAI_API_KEY }),
    startFakeAnthropic({ requireApiKey: env.ANTHROPIC_API_KEY }),
  ]);
  dir = await mkdtemp(join(tmpdir(), 'troupe-judge-'));
  const models = [
    '  grader:',
    '    provider: openai',
    '    model: gpt-4o-mini',
    `    baseURL: ${openai.baseURL}`,
    '    maxAttempts: 2',
    '    retryDelay: 0.01',
    '  critic:',
    '    provider: anthropic',
    '    model: claude-haiku-4-5',
    `    baseURL: ${anthropic.baseURL}`,
    '    maxAttempts: 1',
  ].join('\n');
  await writeFile(join(dir, 'notes.yaml'), pipelineText(models, 'grader'));
  pipeline = await loadPipeline(join(dir, 'notes.yaml'), { toolNames: builtinTools().names(), env });
});
afterAll(async () => {
  await Promise.all([openai.stop(), anthropic.stop(), rm(dir, { recursive: true, force: true })]);
});

async function judge(spec: ScorerSpec, output: string, options: { env?: Record<string, string> } = {}) {
  const scorers = makeScorers([spec], { baseDir: dir, pipeline });
  const [score] = await scoreRun(runOf({ output }), scorers, {
    pipeline,
    baseDir: dir,
    env: options.env ?? env,
  });
  return score;
}

describe('judge', () => {
  it("grades through OpenAI's SDK with the rubric, the goal, the expected and the actual output, and costs apart", async () => {
    openai.enqueue({
      kind: 'message',
      content: '{"score": 0.8, "reason": "Names 1.2 and the faster start."}',
      usage: { inputTokens: 1_000_000, outputTokens: 0 },
    });
    const before = openai.requests.length;
    expect(await judge({ type: 'judge', model: 'grader', rubric }, 'Release 1.2: faster start')).toEqual({
      scorer: 'judge (grader)',
      type: 'judge',
      value: 0.8,
      threshold: 0.5,
      pass: true,
      reason: 'Names 1.2 and the faster start.',
      costUsd: 0.15,
    });
    const request = openai.requests[before];
    expect(request?.body.model).toBe('gpt-4o-mini');
    const prompt = request?.body.messages.at(-1).content as string;
    expect(prompt).toContain(`# Rubric\n${rubric}`);
    expect(prompt).toContain('# Task\nwrite the release note');
    expect(prompt).toContain('# Expected output\nRelease 1.2: faster start');
    expect(prompt).toContain('# Output\nRelease 1.2: faster start');
  });

  it("grades through Anthropic's SDK, reading a reply in a code fence; a low score fails its threshold", async () => {
    anthropic.enqueue({
      kind: 'message',
      content: 'Here is my grade:\n```json\n{"score": 0.2, "reason": "No version."}\n```',
      usage: { inputTokens: 200_000, outputTokens: 100_000 },
    });
    expect(await judge({ type: 'judge', model: 'critic', rubric }, 'Faster start')).toEqual({
      scorer: 'judge (critic)',
      type: 'judge',
      value: 0.2,
      threshold: 0.5,
      pass: false,
      reason: 'No version.',
      costUsd: 0.7,
    });
    expect(anthropic.requests.at(-1)?.body.model).toBe('claude-haiku-4-5');
  });

  it('gives an error score quoting a reply that is no grade, with what it cost', async () => {
    openai.enqueue({
      kind: 'message',
      content: 'Looks good to me!',
      usage: { inputTokens: 1_000_000, outputTokens: 0 },
    });
    expect(await judge({ type: 'judge', model: 'grader', rubric }, 'Release 1.2')).toEqual({
      scorer: 'judge (grader)',
      type: 'judge',
      value: 0,
      threshold: 0.5,
      pass: false,
      reason:
        'error: the judge did not answer {"score": 0..1, "reason": "…"}; it answered "Looks good to me!"',
      error: true,
      costUsd: 0.15,
    });
    openai.enqueue({ kind: 'message', content: '{"score": 7, "reason": "great"}' });
    expect(await judge({ type: 'judge', model: 'grader', rubric }, 'Release 1.2')).toMatchObject({
      value: 0,
      reason: expect.stringContaining('it answered "{\\"score\\": 7'),
    });
  });

  it('gives an error score when the server answers what the SDK cannot read, after the retries', async () => {
    const before = openai.requests.length;
    openai.enqueue({ kind: 'garbage' }, { kind: 'garbage' });
    const score = await judge({ type: 'judge', model: 'grader', rubric }, 'Release 1.2');
    expect(score).toMatchObject({ value: 0, pass: false, reason: expect.stringMatching(/^error: /) });
    expect(openai.requests.length - before).toBe(2);
  });

  it("is an error score when the model's key is not set, and refused when made for a model not in the file", async () => {
    expect(await judge({ type: 'judge', model: 'grader', rubric }, 'Release 1.2', { env: {} })).toMatchObject(
      {
        value: 0,
        reason: 'error: model grader needs the environment variable OPENAI_API_KEY; it is not set',
      },
    );
    expect(() => makeScorers([{ type: 'judge', model: 'gpt', rubric }], { baseDir: dir, pipeline })).toThrow(
      'scorer 1 (judge (gpt)): model gpt is not under the models: of pipeline notes (it has grader, critic)',
    );
  });
});
