import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ScorerSpec } from '@troupe/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { builtinTools } from '../../src/config/builtinTools.ts';
import { type LoadedPipeline, loadPipeline } from '../../src/config/loadPipeline.ts';
import type { CaseRun, ScoreContext } from '../../src/evals/evalTypes.ts';
import { makeScorers, scoreRun } from '../../src/evals/scoreCase.ts';
import { pipelineText, runOf } from './scoredRuns.ts';

const fixtures = join(import.meta.dirname, 'fixtures');
let dir: string;
let context: ScoreContext;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'troupe-scorers-'));
  await writeFile(join(dir, 'notes.script.yaml'), 'agents:\n  writer:\n    - content: A note.\n');
  await writeFile(
    join(dir, 'notes.yaml'),
    pipelineText('  scripted:\n    provider: scripted\n    script: ./notes.script.yaml', 'scripted'),
  );
  const pipeline: LoadedPipeline = await loadPipeline(join(dir, 'notes.yaml'), {
    toolNames: builtinTools().names(),
  });
  context = { pipeline, baseDir: fixtures };
});
afterAll(() => rm(dir, { recursive: true, force: true }));

/** The one score `spec` gives `run`. */
async function scoreOf(spec: ScorerSpec, run: CaseRun) {
  const [score] = await scoreRun(run, makeScorers([spec], { baseDir: fixtures }), context);
  return score;
}

const made = (spec: ScorerSpec) => () => makeScorers([spec], { baseDir: fixtures });

describe('exact, contains and regex', () => {
  it('exact compares the trimmed output with the value, case-folded with ignoreCase', async () => {
    const run = runOf({ output: '  Release 1.2: faster start\n' });
    expect(await scoreOf({ type: 'exact', value: 'Release 1.2: faster start' }, run)).toEqual({
      scorer: 'exact "Release 1.2: faster start"',
      type: 'exact',
      value: 1,
      threshold: 1,
      pass: true,
      reason: 'the output is the expected text',
    });
    expect(await scoreOf({ type: 'exact', value: 'release 1.2: FASTER start' }, run)).toMatchObject({
      value: 0,
      pass: false,
      reason: 'the output "Release 1.2: faster start" is not "release 1.2: FASTER start"',
    });
    expect(
      await scoreOf({ type: 'exact', value: 'release 1.2: FASTER start', ignoreCase: true }, run),
    ).toMatchObject({ value: 1, pass: true });
  });

  it("exact without a value compares with the case's expected output, and is an error score when there is none", async () => {
    const spec: ScorerSpec = { type: 'exact' };
    expect(await scoreOf(spec, runOf({ output: 'Release 1.2: faster start' }))).toMatchObject({
      scorer: 'exact (expected)',
      pass: true,
    });
    expect(await scoreOf(spec, runOf({ output: 'Release 1.3' }))).toMatchObject({ value: 0, pass: false });
    const noExpected = runOf({ output: 'x' }, { id: 'free', goal: 'anything' });
    expect(await scoreOf(spec, noExpected)).toMatchObject({
      value: 0,
      pass: false,
      reason: 'error: nothing to compare with: the scorer has no value and case free no expected output',
    });
    expect(() => makeScorers([spec], { baseDir: fixtures, online: true })).toThrow(
      'scorer 1 (exact (expected)): has no value, and live tasks have no expected output to compare with: give it a `value`',
    );
  });

  it('contains gives the share of its values found, and names the missing ones', async () => {
    const run = runOf({ output: 'Release 1.2 is done' });
    expect(await scoreOf({ type: 'contains', value: 'done' }, run)).toMatchObject({
      scorer: 'contains "done"',
      value: 1,
      pass: true,
    });
    expect(
      await scoreOf({ type: 'contains', value: ['release', 'Changelog'], ignoreCase: true }, run),
    ).toMatchObject({
      value: 0.5,
      pass: false,
      reason: 'the output lacks "Changelog": "Release 1.2 is done"',
    });
  });

  it('regex matches the trimmed output, and a pattern that does not compile is refused at once', async () => {
    const spec: ScorerSpec = { type: 'regex', pattern: '^release \\d+\\.\\d+', flags: 'ig' };
    expect(await scoreOf(spec, runOf({ output: '\nRelease 1.2' }))).toMatchObject({ value: 1, pass: true });
    // One scorer, run after run: a `g` flag's last match does not carry over.
    const scorers = makeScorers([spec], { baseDir: fixtures });
    for (const output of ['Release 1.2', 'release 1.3']) {
      expect(await scoreRun(runOf({ output }), scorers, context)).toMatchObject([{ value: 1 }]);
    }
    expect(await scoreOf(spec, runOf({ output: 'Notes for release 1.2' }))).toMatchObject({
      value: 0,
      reason: 'the output does not match /^release \\d+\\.\\d+/gi: "Notes for release 1.2"',
    });
    expect(made({ type: 'regex', pattern: 'a(b', name: 'shape' })).toThrow(
      /^scorer 1 \(shape\): not a valid regular expression: .*Unterminated group/,
    );
  });

  it('a task that did not complete has no output: 0, saying how it ended', async () => {
    expect(await scoreOf({ type: 'contains', value: 'done' }, runOf({ ended: 'failed' }))).toMatchObject({
      value: 0,
      reason: 'no output: the task failed',
    });
  });
});

describe('jsonSchema', () => {
  const schema = {
    type: 'object',
    required: ['title', 'items'],
    properties: { title: { type: 'string' }, items: { type: 'array', minItems: 1 } },
  };

  it('passes JSON (bare or fenced) that the schema accepts and says where it refuses the rest', async () => {
    const spec: ScorerSpec = { type: 'jsonSchema', schema };
    expect(await scoreOf(spec, runOf({ output: '{"title":"1.2","items":["a"]}' }))).toMatchObject({
      value: 1,
      pass: true,
    });
    expect(
      await scoreOf(spec, runOf({ output: '```json\n{"title":"1.2","items":["a"]}\n```' })),
    ).toMatchObject({ value: 1 });
    expect(await scoreOf(spec, runOf({ output: '{"title":3,"items":[]}' }))).toMatchObject({
      value: 0,
      pass: false,
      reason: 'the schema refuses the output: /title must be string; /items must NOT have fewer than 1 items',
    });
  });

  it('fails output that is not JSON, and refuses a schema Ajv cannot compile', async () => {
    expect(await scoreOf({ type: 'jsonSchema', schema }, runOf({ output: 'Title: 1.2' }))).toMatchObject({
      value: 0,
      reason: 'the output is not JSON: "Title: 1.2"',
    });
    expect(made({ type: 'jsonSchema', schema: { type: 'object', minProperties: 'two' } })).toThrow(
      /^scorer 1 \(jsonSchema\): not a usable JSON Schema: .*minProperties/,
    );
  });
});

describe('cel', () => {
  const cel = (expr: string): ScorerSpec => ({ type: 'cel', expr });

  it('counts the calls of one tool with tools.called(name)', async () => {
    const spec = cel('tools.called("run_command") == 0');
    expect(await scoreOf(spec, runOf({ tools: ['write_file'] }))).toMatchObject({
      scorer: 'cel: tools.called("run_command") == 0',
      value: 1,
      pass: true,
      reason: 'tools.called("run_command") == 0 is true',
    });
    expect(await scoreOf(spec, runOf({ tools: ['write_file', 'run_command'] }))).toMatchObject({
      value: 0,
      pass: false,
    });
    expect(
      await scoreOf(
        cel('tools.called() == 3 && trajectory == ["a", "b", "a"]'),
        runOf({ tools: ['a', 'b', 'a'] }),
      ),
    ).toMatchObject({ value: 1 });
  });

  it("reads steps' rounds and verdicts, usage, duration, status, safety and the case", async () => {
    const spec = cel(
      'steps.review.rounds <= 2 && steps.review.verdict == "approve" && usage.costUsd < 0.05 && ' +
        'usage.modelCalls == 2 && durationMs < 2000 && status == "completed" && safety.denied == 0 && ' +
        'case.metadata.team == "docs" && steps.write.ok',
    );
    expect(await scoreOf(spec, runOf({ reviews: ['reject', 'approve'] }))).toMatchObject({ value: 1 });
    expect(await scoreOf(spec, runOf({ reviews: ['reject', 'reject', 'approve'] }))).toMatchObject({
      value: 0,
    });
    expect(await scoreOf(spec, runOf({ reviews: ['approve'], costUsd: 0.2 }))).toMatchObject({ value: 0 });
  });

  it('reads the output parsed as JSON, whole numbers as ints, and null when it is not JSON', async () => {
    const spec = cel('json != null && json.items.size() == json.count');
    expect(await scoreOf(spec, runOf({ output: '{"count": 2, "items": ["a", "b"]}' }))).toMatchObject({
      value: 1,
    });
    expect(await scoreOf(spec, runOf({ output: 'two items' }))).toMatchObject({ value: 0 });
  });

  it('reads the prompt cache writes in usage, 0 in a run that wrote none', async () => {
    const spec = cel('usage.cacheWriteTokens == 100 && usage.cachedTokens == 0');
    expect(await scoreOf(spec, runOf({ cacheWriteTokens: 100 }))).toMatchObject({ value: 1 });
    expect(await scoreOf(cel('usage.cacheWriteTokens == 0'), runOf({}))).toMatchObject({ value: 1 });
  });

  it('takes a number from 0 to 1 as the value, and anything else as an error score', async () => {
    const run = runOf({ tools: ['a', 'b', 'c', 'd'] });
    expect(await scoreOf(cel('double(tools.called("a")) / double(tools.called())'), run)).toMatchObject({
      value: 0.25,
      pass: false,
    });
    expect(await scoreOf(cel('tools.called()'), run)).toMatchObject({
      value: 0,
      pass: false,
      reason: 'error: tools.called() gives 4, not a bool or a number from 0 to 1',
    });
    expect(await scoreOf(cel('steps.nope.ok'), run)).toMatchObject({
      value: 0,
      reason: expect.stringMatching(/^error: steps.nope.ok: .*nope/),
    });
  });

  it('refuses, when made, an expression that does not parse, names an unknown variable or gives a string', () => {
    expect(made(cel('tools.called("x") =='))).toThrow(
      /^scorer 1 \(cel: tools.called\("x"\) ==\): not a valid CEL expression/,
    );
    expect(made(cel('cost < 1'))).toThrow(/not a valid CEL expression: .*cost/);
    expect(made(cel('output'))).toThrow(
      'scorer 1 (cel: output): gives a string; a CEL scorer must give a bool, or a number from 0 to 1',
    );
  });
});

describe('trajectory', () => {
  const trajectory = (
    match: 'strict' | 'unordered' | 'subset' | 'superset',
    expected: string[],
  ): ScorerSpec => ({
    type: 'trajectory',
    match,
    expected,
  });
  const run = runOf({ tools: ['read_file', 'write_file', 'read_file'] });

  it('strict: the same list, or where it first differs', async () => {
    expect(await scoreOf(trajectory('strict', ['read_file', 'write_file', 'read_file']), run)).toMatchObject({
      scorer: 'trajectory strict',
      value: 1,
    });
    expect(await scoreOf(trajectory('strict', ['read_file', 'read_file', 'write_file']), run)).toMatchObject({
      value: 0,
      reason:
        'the tools called [read_file, write_file, read_file] do not match [read_file, read_file, write_file] (strict): at 2, write_file where the reference has read_file',
    });
  });

  it('unordered: the same calls, as many times each, in any order', async () => {
    expect(
      await scoreOf(trajectory('unordered', ['read_file', 'read_file', 'write_file']), run),
    ).toMatchObject({
      value: 1,
    });
    expect(await scoreOf(trajectory('unordered', ['write_file', 'run_command']), run)).toMatchObject({
      value: 0,
      reason: expect.stringMatching(/: missing run_command; extra read_file, read_file$/),
    });
  });

  it('subset: nothing called outside the reference', async () => {
    expect(await scoreOf(trajectory('subset', ['read_file', 'write_file', 'list_files']), run)).toMatchObject(
      {
        value: 1,
      },
    );
    expect(await scoreOf(trajectory('subset', ['read_file']), run)).toMatchObject({
      value: 0,
      reason: expect.stringMatching(/: outside the reference: write_file$/),
    });
  });

  it('superset: every tool of the reference called', async () => {
    expect(await scoreOf(trajectory('superset', ['write_file']), run)).toMatchObject({ value: 1 });
    expect(await scoreOf(trajectory('superset', ['write_file', 'run_command']), run)).toMatchObject({
      value: 0,
      reason: expect.stringMatching(/: never: run_command$/),
    });
  });

  it('of: steps compares the steps run, a review sent back counting each round', async () => {
    const spec: ScorerSpec = {
      type: 'trajectory',
      match: 'strict',
      of: 'steps',
      expected: ['write', 'review'],
    };
    expect(await scoreOf(spec, runOf({ reviews: ['approve'] }))).toMatchObject({
      scorer: 'trajectory strict (steps)',
      value: 1,
    });
    expect(await scoreOf(spec, runOf({ reviews: ['reject', 'approve'] }))).toMatchObject({
      value: 0,
      reason:
        'the steps run [write, review, review] do not match [write, review] (strict): at 3, review where the reference has nothing',
    });
  });
});

describe('safety', () => {
  it('passes a run within its bounds, and names each count over its bound', async () => {
    const spec: ScorerSpec = { type: 'safety', maxApprovalsAsked: 1 };
    expect(await scoreOf(spec, runOf({ tools: ['write_file'], approvalsAsked: 1 }))).toMatchObject({
      value: 1,
      pass: true,
      reason:
        'within bounds: denied calls 0 (at most 0), sandbox refusals 0 (at most 0), approvals asked 1 (at most 1)',
    });
    const risky = runOf({
      tools: [
        { tool: 'write_file', code: 'denied' },
        { tool: 'http_fetch', code: 'not_declared' },
        { tool: 'read_file', code: 'path_outside_workspace' },
        { tool: 'read_file', code: 'not_found' },
      ],
      approvalsAsked: 2,
    });
    expect(await scoreOf(spec, risky)).toMatchObject({
      value: 0,
      pass: false,
      reason:
        'over bounds: denied calls 2 (at most 0), sandbox refusals 1 (at most 0), approvals asked 2 (at most 1)',
    });
    expect(
      await scoreOf({ type: 'safety', maxDenied: 2, maxSandboxRefusals: 1, maxApprovalsAsked: 2 }, risky),
    ).toMatchObject({ value: 1 });
  });
});

describe('module', () => {
  it('scores with a TypeScript module given the spec options, with its reason; 0.5 is its default threshold', async () => {
    const spec: ScorerSpec = { type: 'module', path: 'releaseScorer.ts', options: { word: 'Release' } };
    expect(await scoreOf(spec, runOf({ output: 'Release 1.2' }))).toEqual({
      scorer: 'module releaseScorer.ts',
      type: 'module',
      value: 1,
      threshold: 0.5,
      pass: true,
      reason: 'mentions Release',
    });
    expect(await scoreOf(spec, runOf({ output: 'Nothing new' }))).toMatchObject({
      value: 0.25,
      pass: false,
      reason: 'does not mention Release',
    });
  });

  it('takes a boolean as 1 or 0, and an answer that is no score as an error score', async () => {
    const bool: ScorerSpec = { type: 'module', path: 'boolScorer.mjs' };
    expect(await scoreOf(bool, runOf({}))).toMatchObject({ value: 1, pass: true });
    expect(await scoreOf(bool, runOf({ ended: 'failed' }))).toMatchObject({ value: 0, pass: false });
    expect(await scoreOf({ type: 'module', path: 'wordyScorer.mjs' }, runOf({}))).toMatchObject({
      value: 0,
      reason:
        'error: wordyScorer.mjs answered "looks fine"; a score is a number from 0 to 1, a boolean, or { value, reason }',
    });
  });

  it('refuses, when made, a module file that does not exist', () => {
    expect(made({ type: 'module', path: 'nope.ts' })).toThrow(
      `scorer 1 (module nope.ts): nope.ts: no such file (looked for ${join(fixtures, 'nope.ts')}, from ${fixtures}; a dataset file's module paths are read from its folder, a stored dataset's from the working directory: run troupe eval run from the folder the dataset was made in, or give the module an absolute path)`,
    );
  });
});

describe('scoreRun', () => {
  it('gives a throwing scorer an error score and still gives the other scores, in order', async () => {
    const scorers = makeScorers(
      [
        { type: 'contains', value: 'Release' },
        { type: 'module', path: 'throwingScorer.ts', name: 'db check' },
        { type: 'cel', expr: 'status == "completed"' },
      ],
      { baseDir: fixtures },
    );
    const scores = await scoreRun(runOf({ output: 'Release 1.2' }), scorers, context);
    expect(scores).toMatchObject([
      { scorer: 'contains "Release"', pass: true },
      {
        scorer: 'db check',
        type: 'module',
        value: 0,
        pass: false,
        reason: 'error: the scorer broke: no database',
      },
      { scorer: 'cel: status == "completed"', pass: true },
    ]);
  });

  it("judges the value against the spec's threshold, and tells scorers of one name apart", async () => {
    const scorers = makeScorers(
      [
        { type: 'contains', value: ['Release', 'notes'], threshold: 0.5, name: 'words' },
        { type: 'contains', value: ['Release', 'notes'], name: 'words' },
      ],
      { baseDir: fixtures },
    );
    const scores = await scoreRun(runOf({ output: 'Release 1.2' }), scorers, context);
    expect(scores).toMatchObject([
      { scorer: 'words', value: 0.5, threshold: 0.5, pass: true },
      { scorer: 'words #2', value: 0.5, threshold: 1, pass: false },
    ]);
  });

  it('gives a scorer of its own that throws an error score too', async () => {
    const broken = {
      name: 'broken',
      type: 'cel' as const,
      score: async () => {
        throw new Error('lost');
      },
    };
    expect(await scoreRun(runOf({}), [broken], context)).toEqual([
      {
        scorer: 'broken',
        type: 'cel',
        value: 0,
        threshold: 1,
        pass: false,
        reason: 'error: lost',
        error: true,
      },
    ]);
  });
});
