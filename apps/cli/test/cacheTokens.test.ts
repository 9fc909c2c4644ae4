import { describe, expect, it } from 'vitest';
import { cacheTokens, tokenCounts } from '../src/format/cacheTokens.ts';

describe('tokenCounts', () => {
  it('writes input→output, then the cache reads and writes apart', () => {
    expect(
      tokenCounts({ inputTokens: 1200, outputTokens: 80, cachedTokens: 900, cacheWriteTokens: 250 }),
    ).toBe('1200→80 tok (900 cache read, 250 cache write)');
    expect(tokenCounts({ inputTokens: 1200, outputTokens: 80, cachedTokens: 900 })).toBe(
      '1200→80 tok (900 cache read)',
    );
    expect(tokenCounts({ inputTokens: 1200, outputTokens: 80, cachedTokens: 0, cacheWriteTokens: 250 })).toBe(
      '1200→80 tok (250 cache write)',
    );
  });

  it('writes nothing of the cache when it was not used', () => {
    expect(tokenCounts({ inputTokens: 12, outputTokens: 3, cachedTokens: 0, cacheWriteTokens: 0 })).toBe(
      '12→3 tok',
    );
    expect(cacheTokens({ cachedTokens: 0 })).toBe('');
  });
});
