import { describe, expect, it } from 'vitest';
import { checkTaskInput } from '../src/inputSchema.ts';

const closed = {
  type: 'object',
  properties: { numbers: { type: 'array', items: { type: 'number' } } },
  required: ['numbers'],
  additionalProperties: false,
};

describe('checkTaskInput', () => {
  it('takes an input that fits, and names each key of one that does not', () => {
    expect(checkTaskInput(closed, { numbers: [1, 2] })).toEqual({ ok: true });
    const misfit = checkTaskInput(closed, { numbers: [1, 'two'], extra: true });
    expect(misfit.ok).toBe(false);
    if (misfit.ok) return;
    expect(misfit.issues.map((i) => i.path).sort()).toEqual(['input', 'input.numbers[1]']);
    expect(misfit.reason).toMatch(/^the input does not match the pipeline's input schema: /);
  });

  it('checks an absent input as {}, so required keys are required of every task', () => {
    const missing = checkTaskInput(closed, undefined);
    expect(missing.ok).toBe(false);
    expect(missing.ok ? [] : missing.issues.map((i) => i.path)).toEqual(['input.numbers']);
  });

  it('checks the keys of a schema that names no type, as JSON Schema applies them to any object', () => {
    const untyped = { properties: { n: { type: 'number' } }, required: ['n'], additionalProperties: false };
    expect(checkTaskInput(untyped, { n: 1 })).toEqual({ ok: true });
    const wrong = checkTaskInput(untyped, { n: 'x', m: 1 });
    expect(wrong.ok ? [] : wrong.issues.map((i) => i.path).sort()).toEqual(['input', 'input.n']);
    expect(checkTaskInput(untyped, undefined).ok).toBe(false);
  });

  it("leaves a gateway session's input.session to the runtime, unless the schema declares it", () => {
    const session = { summary: 'earlier turns', turns: [] };
    expect(checkTaskInput(closed, { numbers: [1], session })).toEqual({ ok: true });
    const declares = { ...closed, properties: { ...closed.properties, session: { type: 'string' } } };
    expect(checkTaskInput(declares, { numbers: [1], session }).ok).toBe(false);
  });
});
