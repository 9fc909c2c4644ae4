import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Score, ScorerSpec } from '@troupe/protocol';
import { SimulatedClock } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { builtinTools } from '../../src/config/builtinTools.ts';
import { type LoadedPipeline, loadPipeline } from '../../src/config/loadPipeline.ts';
import type { ScoreContext } from '../../src/evals/evalTypes.ts';
import { makeScorers, SCORER_TIMEOUT_MS, scoreRun } from '../../src/evals/scoreCase.ts';
import { pipelineText, runOf } from './scoredRuns.ts';

const fixtures = join(import.meta.dirname, 'fixtures');
let dir: string;
let context: ScoreContext;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'troupe-scorer-timeout-'));
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

describe("a scorer's time limit", () => {
  it('makes the score of a module that never answers an error saying it timed out at its limit, and keeps the other scores', async () => {
    const clock = new SimulatedClock();
    const scorers = makeScorers(
      [
        { type: 'module', name: 'stuck', path: 'neverScores.mjs', timeoutMs: 150 },
        { type: 'contains', value: 'note' },
      ],
      { baseDir: fixtures },
    );
    let scores: Score[] | undefined;
    const scoring = scoreRun(runOf({ output: 'A note.' }), scorers, { ...context, clock }).then(
      (s) => (scores = s),
    );
    // The contains scorer answered and cleared its limit; the module's is due in 150 ms of the clock's time.
    await vi.waitFor(() => expect(clock.pending()).toEqual([150]));
    clock.advance(149);
    expect(clock.pending()).toEqual([1]);
    expect(scores).toBeUndefined();
    clock.advance(1);
    await scoring;
    expect(scores).toEqual([
      {
        scorer: 'stuck',
        type: 'module',
        value: 0,
        threshold: 0.5,
        pass: false,
        reason: "error: timed out: no score after 0.15 s (the scorer's timeoutMs)",
        error: true,
      },
      expect.objectContaining({ scorer: 'contains "note"', pass: true }),
    ]);
  });

  it('is 60 s of the clock unless the spec says', async () => {
    const clock = new SimulatedClock();
    const [stuck] = makeScorers([{ type: 'module', name: 'stuck', path: 'neverScores.mjs' }], {
      baseDir: fixtures,
    });
    if (!stuck) throw new Error('no scorer');
    const scoring = stuck.score(runOf({ output: 'A note.' }), { ...context, clock });
    expect(clock.pending()).toEqual([SCORER_TIMEOUT_MS]);
    clock.advance(SCORER_TIMEOUT_MS);
    expect(await scoring).toMatchObject({
      pass: false,
      reason: "error: timed out: no score after 60 s (the scorer's timeoutMs)",
    });
  });

  it('is 60 s unless the spec says, and a spec refuses a time limit that is not a positive whole number of ms', () => {
    expect(SCORER_TIMEOUT_MS).toBe(60_000);
    expect(ScorerSpec.safeParse({ type: 'contains', value: 'x', timeoutMs: 0 }).success).toBe(false);
    expect(ScorerSpec.safeParse({ type: 'contains', value: 'x', timeoutMs: 1.5 }).success).toBe(false);
    expect(ScorerSpec.safeParse({ type: 'contains', value: 'x', timeoutMs: 5_000 }).success).toBe(true);
  });
});

describe('a regex or CEL scorer whose pattern backtracks catastrophically', () => {
  // 40 a's and a "!": /^(a+)+$/ would take days on the main thread (each character doubles it).
  const output = `${'a'.repeat(40)}!`;
  const specs: ScorerSpec[] = [
    { type: 'regex', pattern: '^(a+)+$', timeoutMs: 200 },
    { type: 'cel', expr: 'output.matches("^(a+)+$")', timeoutMs: 200 },
  ];
  // The thread is up before the clock starts: its start is not what is measured.
  beforeAll(async () => {
    const warm = makeScorers([{ type: 'regex', pattern: 'a' }], { baseDir: fixtures });
    expect(await scoreRun(runOf({ output: 'a' }), warm, context)).toMatchObject([{ value: 1 }]);
  });

  it.each(specs)(
    'is stopped at its time limit, an error score, while the event loop stays free ($type)',
    async (spec) => {
      const [scorer] = makeScorers([spec], { baseDir: fixtures });
      if (!scorer) throw new Error('no scorer');
      const started = Date.now();
      // A timer set meanwhile fires on time: the match runs off the event loop.
      let firedLateMs: number | undefined;
      setTimeout(() => {
        firedLateMs = Date.now() - started - 50;
      }, 50);
      const [score] = await scoreRun(runOf({ output }), [scorer], context);
      expect(Date.now() - started).toBeLessThan(1_000);
      expect(score).toMatchObject({
        value: 0,
        pass: false,
        reason: "error: timed out: no score after 0.2 s (the scorer's timeoutMs)",
      });
      expect(firedLateMs).toBeLessThan(100);
      // The stopped thread is replaced: the same pattern scores a short output as usual.
      const { timeoutMs: _, ...unlimited } = spec;
      const again = makeScorers([unlimited], { baseDir: fixtures });
      const [next] = await scoreRun(runOf({ output: 'aaaa' }), again, context);
      expect(next).toMatchObject({ value: 1, pass: true });
    },
  );

  it('scores a plain pattern as before, its g flag starting from the start each time', async () => {
    const scorers = makeScorers(
      [
        { type: 'regex', pattern: 'note', flags: 'g' },
        { type: 'cel', expr: 'output.matches("^A ") && tools.called() == 0' },
      ],
      { baseDir: fixtures },
    );
    for (let i = 0; i < 3; i += 1) {
      expect(await scoreRun(runOf({ output: 'A note.' }), scorers, context)).toMatchObject([
        { value: 1 },
        { value: 1 },
      ]);
    }
  });
});
