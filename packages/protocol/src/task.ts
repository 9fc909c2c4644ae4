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

/** A step id as a flow names it (the pipeline's config checks its characters). */
const StepName = z.string().min(1).max(64);

/**
 * The ended task a restart or fork was made from, as its record, its `task.accepted` and its trace name it: the new
 * task runs on from `step`, and the outputs of the original's steps that ended before `step` first started there are
 * reused, not run again. `edited` says what a fork changed (`input`, `steps.<id>.output`); a restart changes nothing.
 */
export const TaskOriginRef = z.object({
  taskId: TaskId,
  kind: z.enum(['restart', 'fork']),
  step: StepName,
  edited: z.array(z.string().max(80)).max(64).optional(),
  /** Run on the pipeline's newest version, not the one the original ran on (the default). */
  newest: z.literal(true).optional(),
  /** Who asked for it. */
  by: z.string().max(200).optional(),
});
export type TaskOriginRef = z.infer<typeof TaskOriginRef>;

/** A submission's origin: the {@link TaskOriginRef} and, for a fork, the outputs it sets (by step id). */
export const TaskOrigin = z
  .strictObject({ ...TaskOriginRef.shape, set: z.record(StepName, z.string().max(100_000)).optional() })
  .refine((origin) => origin.kind === 'fork' || (origin.set === undefined && origin.edited === undefined), {
    message: 'a restart reuses the original as it was: only a fork sets step outputs',
    path: ['set'],
  });
export type TaskOrigin = z.infer<typeof TaskOrigin>;

/** The origin without the text of its edits, for the record, `task.accepted` and the trace. */
export const originRef = ({ set: _set, ...ref }: TaskOrigin): TaskOriginRef => ref;

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
  /** Set by `troupe restart` and `troupe fork`: the ended task this one goes on from. */
  origin: TaskOrigin.optional(),
});

/** A task as users publish it on `troupe.tasks.<pipeline>`. Unknown keys are refused, so a typo is not lost silently. */
export const TaskSubmission = TaskFields.refine(
  (task) => task.input === undefined || task.inputRef === undefined,
  {
    message: 'give input or inputRef, not both',
    path: ['inputRef'],
  },
)
  .refine((task) => task.inputRef === undefined || task.id !== undefined, {
    message: 'a task whose input is stored names its id (the stored input is named after it)',
    path: ['id'],
  })
  .refine((task) => task.origin === undefined || task.parent === undefined, {
    message:
      "a pipeline step's sub-task is not restarted or forked by itself: restart or fork its parent task",
    path: ['origin'],
  })
  .refine((task) => task.origin === undefined || task.id !== undefined, {
    message: 'a restart or fork names its id, so publishing it again runs it once',
    path: ['id'],
  });
export type TaskSubmission = z.infer<typeof TaskSubmission>;
