import { randomBytes } from 'node:crypto';
import { checkTaskToSubmit, formatIssues, TaskSubmission } from '@troupe/protocol';
import { CliError } from './cliError.ts';

/** A fresh task id: time-ordered, subject-safe. */
export const newTaskId = (): string => `t-${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`;

/**
 * The task `troupe submit` or `troupe run` was given, checked as a coordinator would check it (rather than stored or
 * run and refused there); a bad one is refused with its problems (exit 2).
 */
export function checkedTask(
  candidate: { id: string } & Record<string, unknown>,
): TaskSubmission & { id: string } {
  const parsed = TaskSubmission.safeParse(candidate);
  if (!parsed.success) {
    const problems = formatIssues(parsed.error.issues).map((i) => `${i.path || 'task'}: ${i.message}`);
    throw new CliError(`invalid task: ${problems.join('; ')}`, 2);
  }
  const checked = checkTaskToSubmit(parsed.data);
  if (!checked.ok) throw new CliError(`invalid task: ${checked.reason.replace(/^payload/, 'the task')}`, 2);
  return { ...parsed.data, id: candidate.id };
}
