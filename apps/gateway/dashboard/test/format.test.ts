import { describe, expect, it } from 'vitest';
import { count, duration, since, tokens } from '../src/format.ts';

describe('the dashboard’s numbers', () => {
  it('writes a duration rounded to the unit it shows, so no part reads 60 or 1000', () => {
    expect(
      [
        0, 4.4, 999.4, 999.6, 4_240, 9_960, 42_400, 59_600, 299_600, 245_000, 3_599_600, 7_380_000,
        86_399_000,
      ].map(duration),
    ).toEqual([
      '0 ms',
      '4 ms',
      '999 ms',
      '1.0 s',
      '4.2 s',
      '10 s',
      '42 s',
      '1 min 0 s',
      '5 min 0 s',
      '4 min 5 s',
      '1 h 0 min',
      '2 h 3 min',
      '1 d 0 h',
    ]);
    expect(duration(-5)).toBe('0 ms');
    expect(duration(2 * 86_400_000 + 5 * 3_600_000)).toBe('2 d 5 h');
  });

  it('counts approval deadlines down without a 60 in the seconds', () => {
    const now = Date.parse('2026-01-01T00:00:00.000Z');
    expect(since('2026-01-01T00:00:00.000Z', now + 299_700)).toBe('5 min 0 s');
    expect(since('2026-01-01T00:00:00.000Z', now - 1_000)).toBe('0 ms');
  });

  it('writes tokens as troupe trace does, the prompt cache’s reads and writes apart', () => {
    const usage = { inputTokens: 1200, outputTokens: 80 };
    expect(tokens({ ...usage, cachedTokens: 900, cacheWriteTokens: 250 })).toBe(
      '1200→80 tok (900 cache read, 250 cache write)',
    );
    expect(tokens({ ...usage, cachedTokens: 0, cacheWriteTokens: 1100 })).toBe(
      '1200→80 tok (1100 cache write)',
    );
    expect(tokens({ ...usage, cachedTokens: 900 })).toBe('1200→80 tok (900 cache read)');
    expect(tokens({ ...usage, cachedTokens: 0 })).toBe('1200→80 tok');
  });

  it('writes a count with its noun in the singular only for one', () => {
    expect([0, 1, 2].map((n) => count(n, 'approval'))).toEqual(['0 approvals', '1 approval', '2 approvals']);
    expect(count(1, 'tool call')).toBe('1 tool call');
    expect(count(3, 'summary', 'summaries')).toBe('3 summaries');
  });
});
