import { inspect } from 'node:util';
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

describe('TransportError.is', () => {
  it('knows an error made by another copy of its module, as one CLI bundle hands another (troupe up --gateway)', async () => {
    // A module id of its own makes vitest load the file again: a second TransportError class, as a second bundle has.
    const copyOfModule = '../../src/transport/transportError.ts?copy';
    const copy: typeof import('../../src/transport/transportError.ts') = await import(copyOfModule);
    expect(copy.TransportError).not.toBe(TransportError);
    const foreign = new copy.TransportError('no_responders', 'no one is serving troupe.control.t-1');
    expect(foreign).not.toBeInstanceOf(TransportError);
    expect(TransportError.is(foreign)).toBe(true);
    expect(TransportError.is(foreign, 'no_responders')).toBe(true);
    expect(TransportError.is(foreign, 'timeout')).toBe(false);
  });

  it('refuses what is not one: another error of the same name, a plain object, nothing', () => {
    const lookalike = Object.assign(new Error('no'), { name: 'TransportError', code: 'timeout' });
    expect(TransportError.is(lookalike)).toBe(false);
    expect(TransportError.is({ code: 'timeout' })).toBe(false);
    expect(TransportError.is(undefined)).toBe(false);
    expect(TransportError.is('timeout')).toBe(false);
  });
});

describe('a printed TransportError', () => {
  it('shows its message and code, and no marker of its class', () => {
    const printed = inspect(new TransportError('timeout', 'no reply from troupe.control.t-1 within 10 ms'));
    expect(printed).toContain("code: 'timeout'");
    expect(printed).not.toContain('Symbol(');
  });
});
