import { describe, expect, it } from 'vitest';
import { expiryText } from '../src/requestExpiry.ts';

describe('when a waiting request runs out, as its card says it', () => {
  const now = Date.parse('2026-01-01T00:10:00Z');

  it('counts down to expiresAt while its task runs', () => {
    expect(expiryText({ expiresAt: '2026-01-01T00:14:30Z' }, now)).toBe('expires in 4 min 30 s');
  });

  it('says a request held while its task is paused is held, with the time it has from the resume, not a countdown from the past', () => {
    // Asked at 00:00 for 5 min, paused at 00:02: its expiresAt (00:05) has passed, and it has 3 min once resumed.
    const held = {
      expiresAt: '2026-01-01T00:05:00Z',
      held: { since: '2026-01-01T00:02:00Z', leftMs: 180_000 },
    };
    expect(expiryText(held, now)).toBe('held while the task is paused; 3 min 0 s left when resumed');
  });

  it('counts down to the new expiresAt once resumed (held gone from the record)', () => {
    // Resumed at 00:09 with 3 min left: its asker wrote 00:12.
    expect(expiryText({ expiresAt: '2026-01-01T00:12:00Z' }, now)).toBe('expires in 2 min 0 s');
  });
});
