import { randomBytes } from 'node:crypto';
import { describe, expect, it, vi } from 'vitest';
import { newTraceparent } from '../../src/events/clock.ts';

vi.mock('node:crypto', async (importOriginal) => {
  const actual = await importOriginal<typeof import('node:crypto')>();
  return { ...actual, randomBytes: vi.fn(actual.randomBytes) };
});

describe('newTraceparent', () => {
  it('gives a well-formed trace context, never the same twice, past many refills of its random bytes', () => {
    const made = Array.from({ length: 2_000 }, () => newTraceparent());
    for (const trace of made) expect(trace).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    expect(new Set(made).size).toBe(made.length);
    expect(new Set(made.map((trace) => trace.split('-')[1])).size).toBe(made.length);
  });

  it('draws its random bytes in blocks, not one call into the CSPRNG per id', () => {
    vi.mocked(randomBytes).mockClear();
    for (let i = 0; i < 300; i++) newTraceparent();
    // 300 contexts of 24 bytes each: 7,200 bytes, two 4 KB blocks (a third at most, from where the pool stood).
    expect(vi.mocked(randomBytes).mock.calls.length).toBeLessThanOrEqual(3);
  });
});
