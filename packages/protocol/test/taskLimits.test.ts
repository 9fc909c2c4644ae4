import { describe, expect, it } from 'vitest';
import { DEFAULT_TASK_LIMITS, MAX_MESSAGE_DEPTH, MAX_TASK_DEPTH, parseTask } from '../src/index.ts';

const nested = (levels: number) => `{"goal":"g","input":${'{"a":'.repeat(levels)}1${'}'.repeat(levels)}}`;

describe('parseTask', () => {
  it('takes a task within the limits and refuses one too large or too deep, saying which limit', () => {
    expect(parseTask('{"goal":"hello"}')).toMatchObject({ ok: true, value: { goal: 'hello' } });
    const large = JSON.stringify({ goal: 'x'.repeat(DEFAULT_TASK_LIMITS.maxTaskBytes) });
    expect(parseTask(large)).toMatchObject({ ok: false, limit: 'maxBytes' });
    // The task object is level 1, and `input` the first of the nested levels.
    expect(parseTask(nested(DEFAULT_TASK_LIMITS.maxTaskDepth - 1)).ok).toBe(true);
    expect(parseTask(nested(DEFAULT_TASK_LIMITS.maxTaskDepth))).toMatchObject({
      ok: false,
      limit: 'maxDepth',
    });
  });

  it('refuses 100,000 levels without overflowing the stack', () => {
    expect(parseTask(nested(100_000), { maxTaskBytes: 10_000_000, maxTaskDepth: 64 })).toMatchObject({
      ok: false,
      limit: 'maxDepth',
    });
    expect(MAX_TASK_DEPTH).toBeLessThan(MAX_MESSAGE_DEPTH);
  });
});
