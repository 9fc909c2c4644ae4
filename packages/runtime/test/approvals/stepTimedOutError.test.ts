import { describe, expect, it } from 'vitest';
import { StepTimedOutError } from '../../src/approvals/stepTimedOutError.ts';

describe('StepTimedOutError', () => {
  it('reads as the reason AbortSignal.timeout gives, with a stable code', () => {
    const error = new StepTimedOutError('s-1');
    expect(error).toBeInstanceOf(Error);
    expect(error.name).toBe(AbortSignal.timeout(1).reason?.name ?? 'TimeoutError');
    expect(error.code).toBe('step_timeout');
    expect(error.message).toBe('step s-1 ran out of time');
  });
});
