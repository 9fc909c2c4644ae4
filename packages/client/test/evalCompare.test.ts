import type { CaseResult, Experiment } from '@troupe/protocol';
import { EvalComparison } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { COMPARE_SEED, compareExperiments } from '../src/evalCompare.ts';

interface CaseShape {
  id: string;
  /** Each scorer's value; a scorer passes at 1. */
  scores?: Record<string, number>;
  error?: string;
  cost?: number;
  ms?: number;
}

function caseResult(shape: CaseShape): CaseResult {
  const scores = Object.entries(shape.scores ?? {}).map(([scorer, value]) => ({
    scorer,
    type: 'cel',
    value,
    threshold: 1,
    pass: value >= 1,
    reason: value >= 1 ? 'holds' : `${scorer} is ${value}`,
  }));
  const status = shape.error ? 'error' : scores.every((s) => s.pass) ? 'passed' : 'failed';
  return {
    caseId: shape.id,
    status,
    scores,
    usage: { inputTokens: 10, outputTokens: 5, cachedTokens: 0, costUsd: shape.cost ?? 0.01, modelCalls: 1 },
    durationMs: shape.ms ?? 1000,
    tools: [],
    steps: [],
    ...(shape.error ? { error: shape.error } : {}),
  };
}

function experiment(id: string, shapes: CaseShape[]): Experiment {
  const cases = shapes.map(caseResult);
  const cost = cases.reduce((sum, c) => sum + c.usage.costUsd, 0);
  return {
    id,
    dataset: { name: 'support', version: 1 },
    pipeline: { name: 'helpdesk', file: 'helpdesk.yaml', hash: `hash-${id}`, models: {} },
    mode: 'replay',
    startedAt: '2026-12-07T06:00:00.000Z',
    durationMs: 5000,
    cases,
    totals: {
      cases: cases.length,
      passed: cases.filter((c) => c.status === 'passed').length,
      failed: cases.filter((c) => c.status === 'failed').length,
      errored: cases.filter((c) => c.status === 'error').length,
      skipped: 0,
      meanScore: 0.5,
      costUsd: cost,
      judgeCostUsd: 0.002,
      p50Ms: 1000,
      p90Ms: 1500,
    },
  };
}

const same = (n: number, value = 1): CaseShape[] =>
  Array.from({ length: n }, (_, i) => ({ id: `c${i}`, scores: { ok: value } }));

describe('compareExperiments', () => {
  it('calls a case that passed in A and fails in B a regression, and B worse', () => {
    const a = experiment('a', same(6));
    const b = experiment('b', [...same(5), { id: 'c5', scores: { ok: 0 } }]);
    const comparison = compareExperiments(a, b);
    EvalComparison.parse(comparison);
    const c5 = comparison.cases.find((c) => c.caseId === 'c5');
    expect(c5?.change).toBe('regressed');
    expect(c5?.scoreDelta).toBe(-1);
    expect(c5?.scorers).toEqual([
      {
        scorer: 'ok',
        type: 'cel',
        a: { value: 1, pass: true, reason: 'holds' },
        b: { value: 0, pass: false, reason: 'ok is 0' },
      },
    ]);
    expect(c5?.reason).toBe('passed in A, failed in B: ok (ok is 0)');
    expect(comparison.summary.counts).toMatchObject({ common: 6, regressed: 1, unchanged: 5, passesLost: 1 });
    expect(comparison.summary.passed).toEqual({ a: 6, b: 5, delta: -1 });
    expect(comparison.summary.passRate.b).toBeCloseTo(5 / 6);
    expect(comparison.summary.verdict).toBe('worse');
    expect(comparison.summary.explanation).toBe('1 case that passed in A fails in B.');
  });

  it('calls a case that now passes, or scores higher while still failing, an improvement; no regression is better', () => {
    const a = experiment('a', [
      { id: 'x', scores: { ok: 0 } },
      { id: 'y', scores: { ok: 0.2, other: 0 } },
      { id: 'z', scores: { ok: 1 } },
    ]);
    const b = experiment('b', [
      { id: 'x', scores: { ok: 1 } },
      { id: 'y', scores: { ok: 0.6, other: 0 } },
      { id: 'z', scores: { ok: 1 } },
    ]);
    const comparison = compareExperiments(a, b);
    expect(comparison.cases.map((c) => [c.caseId, c.change])).toEqual([
      ['x', 'improved'],
      ['y', 'improved'],
      ['z', 'unchanged'],
    ]);
    expect(comparison.cases[1]?.reason).toBe('failed in both, mean score 0.10 → 0.30 (ok 0.20 → 0.60)');
    expect(comparison.summary.verdict).toBe('better');
  });

  it('reports cases only in B as added and only in A as removed, outside the mean and the verdict', () => {
    const a = experiment('a', [...same(3), { id: 'old', scores: { ok: 1 } }]);
    const b = experiment('b', [...same(3), { id: 'new', scores: { ok: 0 } }]);
    const comparison = compareExperiments(a, b);
    const byId = new Map(comparison.cases.map((c) => [c.caseId, c]));
    expect(byId.get('old')).toMatchObject({ change: 'removed', reason: 'only in A' });
    expect(byId.get('old')?.b).toBeUndefined();
    expect(byId.get('new')).toMatchObject({ change: 'added', reason: 'only in B (failed)' });
    expect(byId.get('new')?.scoreDelta).toBeUndefined();
    expect(comparison.summary.counts).toMatchObject({ common: 3, added: 1, removed: 1, unchanged: 3 });
    expect(comparison.summary.meanScore).toMatchObject({ a: 1, b: 1, delta: 0 });
    expect(comparison.summary.verdict).toBe('no clear difference');
  });

  it('treats an error in B as a lost pass, with the error as the reason', () => {
    const a = experiment('a', same(2));
    const b = experiment('b', [same(2)[0] as CaseShape, { id: 'c1', error: 'the model key is missing' }]);
    const comparison = compareExperiments(a, b);
    expect(comparison.cases[1]).toMatchObject({
      change: 'regressed',
      reason: 'passed in A, error in B: the model key is missing',
      b: { status: 'error', meanScore: 0, error: 'the model key is missing' },
    });
    expect(comparison.summary.verdict).toBe('worse');
  });

  it('bounds the mean delta with a seeded bootstrap interval: above 0 is better, below 0 worse', () => {
    // Every case scores 0.3 higher in B, but still fails: no pass changes, the interval decides.
    const a = experiment(
      'a',
      Array.from({ length: 20 }, (_, i) => ({ id: `c${i}`, scores: { q: 0.2 + (i % 5) * 0.1 } })),
    );
    const b = experiment(
      'b',
      Array.from({ length: 20 }, (_, i) => ({
        id: `c${i}`,
        scores: { q: 0.5 + (i % 5) * 0.1 - (i % 2) * 0.05 },
      })),
    );
    const up = compareExperiments(a, b).summary;
    expect(up.meanScore.interval).toMatchObject({ level: 0.95, seed: COMPARE_SEED, resamples: 10_000 });
    expect(up.meanScore.interval?.low).toBeGreaterThan(0);
    expect(up.meanScore.interval?.low).toBeLessThanOrEqual(up.meanScore.delta);
    expect(up.meanScore.interval?.high).toBeGreaterThanOrEqual(up.meanScore.delta);
    expect(up.verdict).toBe('better');
    expect(up.explanation).toMatch(
      /^the mean score's 95% interval over 20 common cases is \[\+0\.\d\d, \+0\.\d\d\]: B scores higher\.$/,
    );

    const down = compareExperiments(b, a).summary;
    expect(down.meanScore.interval?.high).toBeLessThan(0);
    expect(down.verdict).toBe('worse');
  });

  it('finds no clear difference when the cases move both ways within what the case count can tell', () => {
    // One case's score rose and another's fell (no pass changed): they balance out and the interval spans 0.
    const a = experiment('a', [
      { id: 'c0', scores: { q: 0 } },
      { id: 'c1', scores: { q: 0.9 } },
      ...same(4).map((c, i) => ({ ...c, id: `d${i}` })),
    ]);
    const b = experiment('b', [
      { id: 'c0', scores: { q: 0.2 } },
      { id: 'c1', scores: { q: 0.7 } },
      ...same(4).map((c, i) => ({ ...c, id: `d${i}` })),
    ]);
    const summary = compareExperiments(a, b).summary;
    expect(summary.counts).toMatchObject({ improved: 1, regressed: 1, passesLost: 0 });
    expect(summary.meanScore.interval?.low).toBeLessThan(0);
    expect(summary.meanScore.interval?.high).toBeGreaterThan(0);
    expect(summary.verdict).toBe('no clear difference');
    expect(summary.explanation).toMatch(
      /^1 case improved and 1 regressed; with 6 cases a difference under ±0\.\d\d in mean score cannot be told\.$/,
    );

    const unchanged = compareExperiments(a, a).summary;
    expect(unchanged.verdict).toBe('no clear difference');
    expect(unchanged.explanation).toBe(
      'No case changed; each of the 6 common cases scored the same in A and B.',
    );
  });

  it('calls B worse when scores fell and none rose, though no pass was lost and the interval spans 0', () => {
    const a = experiment('a', [
      { id: 'c0', scores: { q: 0.9 } },
      ...same(5).map((c, i) => ({ ...c, id: `d${i}` })),
    ]);
    const b = experiment('b', [
      { id: 'c0', scores: { q: 0.6 } },
      ...same(5).map((c, i) => ({ ...c, id: `d${i}` })),
    ]);
    const summary = compareExperiments(a, b).summary;
    expect(summary.meanScore.interval?.high).toBeGreaterThanOrEqual(0);
    expect(summary.counts.passesLost).toBe(0);
    expect(summary.verdict).toBe('worse');
    expect(summary.explanation).toMatch(/^1 case scored lower in B and none higher; with 6 cases /);
  });

  it('gives the same interval for the same experiments, run after run', () => {
    const a = experiment(
      'a',
      Array.from({ length: 7 }, (_, i) => ({ id: `c${i}`, scores: { q: (i * 0.13) % 1 } })),
    );
    const b = experiment(
      'b',
      Array.from({ length: 7 }, (_, i) => ({ id: `c${i}`, scores: { q: (i * 0.29) % 1 } })),
    );
    const first = compareExperiments(a, b);
    const second = compareExperiments(structuredClone(a), structuredClone(b));
    expect(second).toEqual(first);
    expect(first.summary.meanScore.interval?.low).not.toBe(first.summary.meanScore.interval?.high);
  });

  it('sums cost, judge cost and latency: B − A and the percentage of A', () => {
    const a = experiment('a', [{ id: 'c0', scores: { ok: 1 }, cost: 0.02, ms: 800 }]);
    const b = experiment('b', [{ id: 'c0', scores: { ok: 1 }, cost: 0.03, ms: 1200 }]);
    b.totals.p50Ms = 1200;
    const { summary, cases } = compareExperiments(a, b);
    expect(summary.costUsd.a).toBeCloseTo(0.02);
    expect(summary.costUsd.delta).toBeCloseTo(0.01);
    expect(summary.costUsd.percent).toBeCloseTo(50);
    expect(summary.judgeCostUsd).toEqual({ a: 0.002, b: 0.002, delta: 0 });
    expect(summary.p50Ms).toEqual({ a: 1000, b: 1200, delta: 200 });
    expect(cases[0]?.costDeltaUsd).toBeCloseTo(0.01);
    expect(cases[0]?.durationDeltaMs).toBe(400);

    const free = compareExperiments(experiment('a', [{ id: 'c0', scores: { ok: 1 }, cost: 0 }]), b);
    expect(free.summary.costUsd.percent).toBeNull();
  });
});
