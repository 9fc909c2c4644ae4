import { describe, expect, it } from 'vitest';
import { isName, isTaskId, NAME_PATTERN, Name, TASK_ID_PATTERN, TaskId } from '../src/index.ts';

describe('Name', () => {
  it.each(['a', '7', 'demo', 'code-review', 'a1-b2', 'x'.repeat(63)])('accepts %j', (name) => {
    expect(isName(name)).toBe(true);
    expect(NAME_PATTERN.test(name)).toBe(true);
    expect(Name.safeParse(name).success).toBe(true);
  });

  it.each([
    ['empty', ''],
    ['upper case', 'Demo'],
    ['a dot', 'a.b'],
    ['an underscore', 'a_b'],
    ['a space', 'a b'],
    ['a leading dash', '-a'],
    ['a trailing dash', 'a-'],
    ['a NATS wildcard', '*'],
    ['a NATS tail wildcard', '>'],
    ['64 characters', 'x'.repeat(64)],
  ])('refuses %s', (_label, name) => {
    expect(isName(name)).toBe(false);
    expect(Name.safeParse(name).success).toBe(false);
  });

  it('explains the rule in its error message', () => {
    expect(Name.safeParse('Bad.Name').error?.issues[0]?.message).toBe(
      'must be 1-63 characters of a-z, 0-9 and "-", starting and ending with a letter or digit',
    );
  });
});

describe('TaskId', () => {
  it.each(['a', 'A', '_', '-', 'Task_42-b', '0123', 'a'.repeat(64)])('accepts %j', (id) => {
    expect(isTaskId(id)).toBe(true);
    expect(TASK_ID_PATTERN.test(id)).toBe(true);
    expect(TaskId.safeParse(id).success).toBe(true);
  });

  it.each([
    ['empty', ''],
    ['a dot', 'a.b'],
    ['a space', 'a b'],
    ['a slash', 'a/b'],
    ['a NATS wildcard', 'a*'],
    ['a non-ASCII letter', 'tâche'],
    ['a trailing newline', 'abc\n'],
    ['65 characters', 'a'.repeat(65)],
  ])('refuses %s', (_label, id) => {
    expect(isTaskId(id)).toBe(false);
    expect(TaskId.safeParse(id).success).toBe(false);
  });

  it('explains the rule in its error message', () => {
    expect(TaskId.safeParse('a.b').error?.issues[0]?.message).toBe(
      'must be 1-64 characters of A-Z, a-z, 0-9, "_" and "-"',
    );
  });
});
