import { describe, expect, it } from 'vitest';
import {
  DEFAULT_TASK_LIMITS,
  MAX_MESSAGE_DEPTH,
  MAX_TASK_DEPTH,
  parseStoredInput,
  parseTask,
  TaskSubmission,
} from '../src/index.ts';

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
    expect(parseTask(nested(100_000), { ...DEFAULT_TASK_LIMITS, maxTaskBytes: 10_000_000 })).toMatchObject({
      ok: false,
      limit: 'maxDepth',
    });
    expect(MAX_TASK_DEPTH).toBeLessThan(MAX_MESSAGE_DEPTH);
  });
});

describe('stored inputs', () => {
  const ref = {
    bucket: 'troupe-inputs-demo',
    name: 't-1.input.0123456789abcdef',
    bytes: 10,
    sha256: 'a'.repeat(64),
  };

  it('takes inputRef in place of input, on a task that names its id', () => {
    expect(TaskSubmission.safeParse({ id: 't-1', goal: 'g', inputRef: ref }).success).toBe(true);
    const both = TaskSubmission.safeParse({ id: 't-1', goal: 'g', input: {}, inputRef: ref });
    expect(both.error?.issues[0]).toMatchObject({
      path: ['inputRef'],
      message: 'give input or inputRef, not both',
    });
    const anonymous = TaskSubmission.safeParse({ goal: 'g', inputRef: ref });
    expect(anonymous.error?.issues[0]?.path).toEqual(['id']);
  });

  it('reads a stored input as an object within maxInputBytes and maxTaskDepth', () => {
    expect(parseStoredInput('{"doc":"text"}')).toMatchObject({ ok: true, value: { doc: 'text' } });
    expect(parseStoredInput('[1,2]')).toMatchObject({ ok: false });
    const limits = { ...DEFAULT_TASK_LIMITS, maxInputBytes: 100 };
    expect(parseStoredInput(JSON.stringify({ doc: 'x'.repeat(200) }), limits)).toMatchObject({
      ok: false,
      limit: 'maxBytes',
    });
    expect(parseStoredInput(`${'{"a":'.repeat(100)}1${'}'.repeat(100)}`)).toMatchObject({
      ok: false,
      limit: 'maxDepth',
    });
  });
});
