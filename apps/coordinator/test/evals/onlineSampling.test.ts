import { describe, expect, it } from 'vitest';
import {
  SCORE_WAIT_MARGIN_MS,
  sampled,
  sampleFraction,
  scoreWaitMs,
} from '../../src/evals/onlineSampling.ts';

const ids = Array.from({ length: 20_000 }, (_, i) => `task-${i}`);

describe('online sampling', () => {
  it('decides by the task id alone: the same id, the same answer, wherever and whenever it is asked', () => {
    const first = ids.map((id) => sampled(id, 0.25));
    expect(ids.map((id) => sampled(id, 0.25))).toEqual(first);
    // Fixed by the hash, not by this process: a coordinator restarted, or another one, decides the same.
    expect(sampleFraction('task-0')).toBeCloseTo(0.375, 3);
    expect(sampleFraction('task-1')).toBeCloseTo(0.4804, 3);
  });

  it('scores about the share of tasks the rate says, every task at 1 and none at 0', () => {
    for (const rate of [0.05, 0.3, 0.5, 0.9]) {
      const share = ids.filter((id) => sampled(id, rate)).length / ids.length;
      expect(Math.abs(share - rate), `rate ${rate}: ${share}`).toBeLessThan(0.015);
    }
    expect(ids.every((id) => sampled(id, 1))).toBe(true);
    expect(ids.some((id) => sampled(id, 0))).toBe(false);
  });

  it('samples at a lower rate a subset of what it samples at a higher one', () => {
    const low = ids.filter((id) => sampled(id, 0.1));
    expect(low.every((id) => sampled(id, 0.4))).toBe(true);
  });

  it("says how long a watcher waits for a task's score: its slowest scorer's limit and a margin, none when none comes", () => {
    const scorers = [{ timeoutMs: 5_000 }, {}, { timeoutMs: 90_000 }];
    expect(scoreWaitMs({ sample: 1, scorers }, 'task-0')).toBe(90_000 + SCORE_WAIT_MARGIN_MS);
    expect(scoreWaitMs({ sample: 1, scorers: [{ timeoutMs: 5_000 }, {}] }, 'task-0')).toBe(
      60_000 + SCORE_WAIT_MARGIN_MS,
    );
    // task-0 falls at 0.375: a sample of 0.3 leaves it out, and no score will come.
    expect(scoreWaitMs({ sample: 0.3, scorers }, 'task-0')).toBeUndefined();
    expect(scoreWaitMs({ sample: 0.4, scorers }, 'task-0')).toBeDefined();
    expect(scoreWaitMs(undefined, 'task-0')).toBeUndefined();
  });
});
