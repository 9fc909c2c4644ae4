import { describe, expect, it } from 'vitest';
import {
  byChange,
  type CaseComparison,
  changedScorers,
  costChange,
  scoreChange,
  scoreOfEvent,
  scoreTitle,
  signed,
} from '../src/evalShapes.ts';

const side = (value: number, pass: boolean) => ({ value, pass, reason: '' });
const compared = (
  caseId: string,
  change: CaseComparison['change'],
  scorers: CaseComparison['scorers'] = [],
) => ({
  caseId,
  change,
  scorers,
  reason: '',
});

describe('what the dashboard’s Experiments view says of a comparison', () => {
  it('names each scorer that changed between A and B, and how', () => {
    const c = compared('c1', 'regressed', [
      { scorer: 'title', type: 'contains', a: side(1, true), b: side(1, true) },
      { scorer: 'version', type: 'contains', a: side(1, true), b: side(0, false) },
      { scorer: 'judge', type: 'judge', a: side(0.9, true), b: side(0.75, true) },
      { scorer: 'tools', type: 'trajectory', b: side(1, true) },
      { scorer: 'safety', type: 'safety', a: side(1, true) },
    ]);
    expect(changedScorers(c)).toEqual([
      'version pass→fail',
      'judge 0.90→0.75',
      'tools (new)',
      'safety (gone)',
    ]);
  });

  it('writes deltas signed, a zero as ±, and the summary’s cost and score lines', () => {
    expect([signed(0.25), signed(-0.1), signed(0.001), signed(-0.004)]).toEqual([
      '+0.25',
      '−0.10',
      '±0.00',
      '±0.00',
    ]);
    expect(costChange({ a: 0.004, b: 0.007, delta: 0.003, percent: 75 })).toBe(
      '$0.0040 → $0.0070, +$0.0030 (+75.0%)',
    );
    expect(costChange({ a: 0, b: 0.001, delta: 0.001, percent: null })).toBe('$0.0000 → $0.0010, +$0.0010');
    expect(
      scoreChange({
        a: 1,
        b: 0.75,
        delta: -0.25,
        interval: { low: -0.5, high: 0, level: 0.95, resamples: 10, seed: 34 },
      }),
    ).toBe('1.00 → 0.75, −0.25 (95% interval −0.50 to ±0.00)');
  });

  it('lists regressions first, then improvements, additions, removals and the unchanged, each by id', () => {
    const cases = [
      compared('b', 'unchanged'),
      compared('z', 'regressed'),
      compared('a', 'improved'),
      compared('c', 'regressed'),
      compared('d', 'removed'),
    ];
    expect(cases.sort(byChange).map((c) => c.caseId)).toEqual(['c', 'z', 'a', 'd', 'b']);
  });

  it('reads a task’s score from its eval.scored event as the gateway gives it', () => {
    const score = scoreOfEvent({
      taskId: 't-1',
      pipeline: 'notes',
      ts: '2026-12-07T06:00:00.000Z',
      data: {
        status: 'completed',
        pass: false,
        scores: [
          { scorer: 'title', value: 1, pass: true },
          { scorer: 'version', value: 0, pass: false },
        ],
      },
    });
    expect(score).toMatchObject({ pass: false, meanScore: 0.5, scorers: 2, failed: ['version'] });
    expect(scoreTitle(score)).toBe('1 of 2 scorers passed; failed: version');
    const unscored = scoreOfEvent({
      taskId: 't-2',
      pipeline: 'notes',
      ts: '',
      data: { pass: false, scores: [], error: 'no events' },
    });
    expect(scoreTitle(unscored)).toBe('not scored: no events');
  });
});
