import { describe, expect, it } from 'vitest';
import { TransportError } from '../../src/transport/transportError.ts';

describe('TransportError.fromReply', () => {
  it("keeps a responder's code this version knows", () => {
    const error = TransportError.fromReply({
      ok: false,
      error: { code: 'unknown_task', message: 'no task t-1' },
    });
    expect(TransportError.is(error, 'unknown_task')).toBe(true);
    expect(error.message).toBe('no task t-1');
  });

  it("keeps an agent host's step error code", () => {
    const error = TransportError.fromReply({
      ok: false,
      error: { code: 'misrouted', message: 'wrong agent' },
    });
    expect(error.code).toBe('misrouted');
  });

  it('reads a code it does not know as refused, naming the code', () => {
    const error = TransportError.fromReply({ ok: false, error: { code: 'from_the_future', message: 'no' } });
    expect(error.code).toBe('refused');
    expect(error.message).toBe('refused (from_the_future): no');
  });
});
