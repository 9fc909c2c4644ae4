import { describe, expect, it } from 'vitest';
import { TaskSubmission } from '../src/index.ts';

/** The dotted paths and codes zod reports, so a test can say which field was refused and why. */
function refusal(input: unknown): { path: string; code: string }[] {
  const result = TaskSubmission.safeParse(input);
  if (result.success) throw new Error(`expected ${JSON.stringify(input)} to be refused`);
  return result.error.issues.map((issue) => ({ path: issue.path.join('.'), code: issue.code }));
}

describe('TaskSubmission', () => {
  it('accepts a bare goal and leaves the optional fields out', () => {
    expect(TaskSubmission.parse({ goal: 'write hello.md' })).toEqual({ goal: 'write hello.md' });
  });

  it('accepts every field when each is well formed', () => {
    const full = {
      id: 'Task_42-b',
      goal: 'fix the build',
      input: { files: ['a.ts'], depth: 2 },
      metadata: { ticket: 'OPS-7' },
    };
    expect(TaskSubmission.parse(full)).toEqual(full);
  });

  it('trims the goal', () => {
    expect(TaskSubmission.parse({ goal: '  ship it \n' }).goal).toBe('ship it');
  });

  it('refuses a missing goal', () => {
    expect(refusal({})).toEqual([{ path: 'goal', code: 'invalid_type' }]);
  });

  it.each(['', '   ', '\n\t'])('refuses an empty goal %j with "must not be empty"', (goal) => {
    const result = TaskSubmission.safeParse({ goal });
    expect(result.success).toBe(false);
    expect(result.error?.issues[0]).toMatchObject({ path: ['goal'], message: 'must not be empty' });
  });

  it('refuses a goal over 100 000 characters', () => {
    expect(TaskSubmission.safeParse({ goal: 'x'.repeat(100_000) }).success).toBe(true);
    expect(refusal({ goal: 'x'.repeat(100_001) })).toEqual([{ path: 'goal', code: 'too_big' }]);
  });

  it('refuses an unknown key such as the typo "gaol", naming it', () => {
    const result = TaskSubmission.safeParse({ goal: 'g', gaol: 'g' });
    expect(result.success).toBe(false);
    expect(result.error?.issues).toEqual([
      expect.objectContaining({ code: 'unrecognized_keys', keys: ['gaol'] }),
    ]);
  });

  it('refuses a typo even when the goal itself is missing', () => {
    expect(refusal({ gaol: 'write hello.md' })).toEqual(
      expect.arrayContaining([
        { path: 'goal', code: 'invalid_type' },
        { path: '', code: 'unrecognized_keys' },
      ]),
    );
  });

  it.each([
    ['a dot', 'a.b'],
    ['a space', 'a b'],
    ['a slash', 'a/b'],
    ['a NATS wildcard', 'a*'],
    ['65 characters', 'a'.repeat(65)],
    ['nothing', ''],
  ])('refuses an id with %s', (_label, id) => {
    expect(refusal({ id, goal: 'g' })).toEqual([{ path: 'id', code: 'invalid_format' }]);
  });

  it('accepts an id of exactly 64 characters', () => {
    expect(TaskSubmission.safeParse({ id: 'a'.repeat(64), goal: 'g' }).success).toBe(true);
  });

  it('refuses metadata values that are not strings', () => {
    expect(refusal({ goal: 'g', metadata: { priority: 1 } })).toEqual([
      { path: 'metadata.priority', code: 'invalid_type' },
    ]);
  });

  it('refuses input that is not an object', () => {
    expect(refusal({ goal: 'g', input: ['a'] })).toEqual([{ path: 'input', code: 'invalid_type' }]);
  });

  it.each([
    ['null', null],
    ['a string', 'write hello.md'],
    ['a number', 42],
    ['an array', [{ goal: 'g' }]],
    ['undefined', undefined],
  ])('refuses %s as a whole submission', (_label, input) => {
    expect(refusal(input)).toEqual([{ path: '', code: 'invalid_type' }]);
  });
});

describe('TaskSubmission origin', () => {
  const fork = { taskId: 't-1', kind: 'fork', step: 'review', set: { plan: 'a better plan' } };

  it('takes a restart, and a fork with the outputs it sets', () => {
    const restart = { id: 't-2', goal: 'g', origin: { taskId: 't-1', kind: 'restart', step: 'test' } };
    expect(TaskSubmission.safeParse(restart).success).toBe(true);
    expect(TaskSubmission.safeParse({ id: 't-3', goal: 'g', origin: fork }).success).toBe(true);
  });

  it('refuses a restart that sets outputs, saying only a fork does', () => {
    const parsed = TaskSubmission.safeParse({ id: 't-2', goal: 'g', origin: { ...fork, kind: 'restart' } });
    expect(parsed.error?.issues[0]?.message).toMatch(/only a fork sets step outputs/);
  });

  it('refuses an origin without an id, and an origin beside a parent', () => {
    expect(TaskSubmission.safeParse({ goal: 'g', origin: fork }).error?.issues[0]?.message).toMatch(
      /names its id/,
    );
    const parent = { taskId: 'p', pipeline: 'demo', step: 's', depth: 1 };
    const both = TaskSubmission.safeParse({ id: 't-4', goal: 'g', origin: fork, parent });
    expect(both.error?.issues[0]?.message).toMatch(/restart or fork its parent task/);
  });

  it('refuses an origin with an unknown kind or an unknown key', () => {
    expect(
      TaskSubmission.safeParse({ id: 't', goal: 'g', origin: { ...fork, kind: 'rewind' } }).success,
    ).toBe(false);
    expect(TaskSubmission.safeParse({ id: 't', goal: 'g', origin: { ...fork, at: 'x' } }).success).toBe(
      false,
    );
  });
});
