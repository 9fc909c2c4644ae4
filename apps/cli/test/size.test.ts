import { describe, expect, it } from 'vitest';
import { parseSize } from '../src/format/size.ts';

describe('parseSize', () => {
  it('reads bytes, decimal units and binary units', () => {
    expect(parseSize('1048576')).toBe(1_048_576);
    expect(parseSize('512MiB')).toBe(536_870_912);
    expect(parseSize('2GB')).toBe(2_000_000_000);
    expect(parseSize('1.5g')).toBe(1_500_000_000);
    expect(parseSize(' 64 KiB ')).toBe(65_536);
  });

  it('refuses what is not a size, and zero', () => {
    for (const text of ['', 'big', '12 parsecs', '-5MB', '0', '0GiB', 'MB'])
      expect(parseSize(text), text).toBeUndefined();
  });
});
