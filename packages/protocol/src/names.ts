import { z } from 'zod';

/** Pipeline and agent names: lower-case letters, digits and dashes, so they are safe NATS subject tokens. */
export const NAME_PATTERN = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

/** Task ids: letters, digits, `_` and `-`, at most 64 characters, so they are safe NATS subject tokens. */
export const TASK_ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;

export const Name = z
  .string()
  .regex(
    NAME_PATTERN,
    'must be 1-63 characters of a-z, 0-9 and "-", starting and ending with a letter or digit',
  );
export type Name = z.infer<typeof Name>;

export const TaskId = z
  .string()
  .regex(TASK_ID_PATTERN, 'must be 1-64 characters of A-Z, a-z, 0-9, "_" and "-"');
export type TaskId = z.infer<typeof TaskId>;

export const isName = (value: string): boolean => NAME_PATTERN.test(value);
export const isTaskId = (value: string): boolean => TASK_ID_PATTERN.test(value);
