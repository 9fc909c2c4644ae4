import { describe, expect, it } from 'vitest';
import { StepTold, toldTurn } from '../../src/agent/stepTold.ts';

const at = '2026-12-06T00:00:00.000Z';
const m1 = { id: 'm1', text: 'use the v2 API', by: 'ann', at };
const m2 = { id: 'm2', text: 'and cite it', at };

describe('StepTold', () => {
  it('keeps what its request carries and what it hears, oldest first, each id once', () => {
    const told = new StepTold([m1]);
    told.hear(m2);
    told.hear({ ...m1, text: 'heard again' });
    expect(told.unread).toEqual([m1, m2]);
    expect(told.readIds).toEqual([]);
  });

  it('never keeps a message again once read, heard again or found again in a record', () => {
    const told = new StepTold([m1, m2]);
    told.read([m1]);
    expect(told.unread).toEqual([m2]);
    told.hear(m1);
    expect(told.unread).toEqual([m2]);
    expect(told.notRead([m1, m2])).toEqual([m2]);
    told.read([m2, m1]);
    expect(told.readIds).toEqual(['m1', 'm2']);
    expect(told.unread).toEqual([]);
  });
});

describe('toldTurn', () => {
  it('is a user turn that says who sent it while the agent works, the same for the same message', () => {
    expect(toldTurn(m1)).toEqual({
      role: 'user',
      content: 'Message from ann, sent while you work on this step:\n\nuse the v2 API',
    });
    expect(toldTurn(m2).content).toMatch(/^Message from a person, sent while you work/);
  });
});
