import { z } from 'zod';
import { Name, TaskId } from './names.ts';
import { ValueRef } from './valueRef.ts';

/** How deep pipelines may run inside one another (`kind: pipeline`): a task at this depth runs no sub-pipeline. */
export const MAX_PIPELINE_DEPTH = 5;

/** The task whose `pipeline` step submitted this one, and how deep in such steps it is (1: a direct child). */
export const TaskParent = z.strictObject({
  taskId: TaskId,
  pipeline: Name,
  step: z.string().min(1).max(64),
  depth: z.number().int().min(1).max(MAX_PIPELINE_DEPTH),
  /** The parent's trace context: the child's trace continues it. */
  traceparent: z.string().max(200).optional(),
});
export type TaskParent = z.infer<typeof TaskParent>;

/** The fields of a {@link TaskSubmission}, before the checks between them: for schemas made from its shape. */
export const TaskFields = z.strictObject({
  /** Idempotency key: a task with an id already seen is not run twice. Generated when absent. */
  id: TaskId.optional(),
  goal: z.string().trim().min(1, 'must not be empty').max(100_000),
  /** Free-form structured input handed to every step. */
  input: z.record(z.string(), z.unknown()).optional(),
  /**
   * The input, when it is too large for the message: its JSON, stored whole in the pipeline's inputs bucket
   * (`troupe-inputs-<pipeline>`) under a name that starts with `<id>.input.` (see {@link inputBucket}). In place of
   * `input`, never beside it; a task with one names its `id`.
   */
  inputRef: ValueRef.optional(),
  /** Labels carried on every event of the task (who submitted it, a ticket number, …). */
  metadata: z.record(z.string(), z.string().max(1_000)).optional(),
  /** Set by a `pipeline` step: the task that runs this one as a step. */
  parent: TaskParent.optional(),
});

/** A task as users publish it on `troupe.tasks.<pipeline>`. Unknown keys are refused, so a typo is not lost silently. */
export const TaskSubmission = TaskFields.refine(
  (task) => task.input === undefined || task.inputRef === undefined,
  {
    message: 'give input or inputRef, not both',
    path: ['inputRef'],
  },
).refine((task) => task.inputRef === undefined || task.id !== undefined, {
  message: 'a task whose input is stored names its id (the stored input is named after it)',
  path: ['id'],
});
export type TaskSubmission = z.infer<typeof TaskSubmission>;
