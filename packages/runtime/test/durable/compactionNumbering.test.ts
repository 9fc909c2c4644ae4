import { describe, expect, it } from 'vitest';
import { StepJournal } from '../../src/durable/stepJournal.ts';

const compacted = (stepId: string, index?: number, before = 10) => ({
  stepId,
  before,
  after: 3,
  estimatedTokens: 900,
  ...(index === undefined ? {} : { index }),
});

describe("StepJournal's numbering of a run's summaries", () => {
  it('numbers each by its index, and a repeat of one (a resumed run published it again) not at all', () => {
    const n = StepJournal.compactionNumbering();
    expect([
      n(compacted('s1', 1)),
      n(compacted('s1', 2)),
      n(compacted('s1', 1)),
      n(compacted('s1', 3)),
    ]).toEqual([1, 2, undefined, 3]);
  });

  it('numbers unnumbered ones (from older hosts) in the order they came in their step, a repeat not at all', () => {
    const n = StepJournal.compactionNumbering();
    expect([
      n(compacted('s1', undefined, 10)),
      n(compacted('s2', undefined, 10)),
      n(compacted('s1', undefined, 10)),
      n(compacted('s1', undefined, 14)),
    ]).toEqual([1, 1, undefined, 2]);
    expect(StepJournal.compactionKey('s1', 2)).toBe('s1.c2');
  });
});
