import { z } from 'zod';
import { TaskId } from './names.ts';

/** A task as users publish it on `troupe.tasks.<pipeline>`. Unknown keys are refused, so a typo is not lost silently. */
export const TaskSubmission = z.strictObject({
  /** Idempotency key: a task with an id already seen is not run twice. Generated when absent. */
  id: TaskId.optional(),
  goal: z.string().trim().min(1, 'must not be empty').max(100_000),
  /** Free-form structured input handed to every step. */
  input: z.record(z.string(), z.unknown()).optional(),
  /** Labels carried on every event of the task (who submitted it, a ticket number, …). */
  metadata: z.record(z.string(), z.string().max(1_000)).optional(),
});
export type TaskSubmission = z.infer<typeof TaskSubmission>;
