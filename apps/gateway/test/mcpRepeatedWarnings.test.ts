import { afterEach, describe, expect, it, vi } from 'vitest';
import { withoutRepeats } from '../src/mcp/repeatedWarnings.ts';

describe('withoutRepeats: a warning said once, and again only after a while', () => {
  afterEach(() => void vi.useRealTimers());

  it('passes each text on once per period, and other texts at once', () => {
    vi.useFakeTimers();
    const said: string[] = [];
    const warn = withoutRepeats((m) => void said.push(m), 60_000);
    warn('no coordinator');
    warn('no coordinator');
    warn('NATS away');
    vi.advanceTimersByTime(59_999);
    warn('no coordinator');
    vi.advanceTimersByTime(1);
    warn('no coordinator');
    expect(said).toEqual(['no coordinator', 'NATS away', 'no coordinator']);
  });
});
