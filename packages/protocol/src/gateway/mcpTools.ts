import { z } from 'zod';

/**
 * The gateway's MCP tools for long tasks (`troupe_start`, `troupe_get`, `troupe_cancel`) and for steering them
 * (`troupe_tell`, `troupe_pause`, `troupe_resume`, `troupe_restart`, `troupe_fork`): their inputs and what they
 * answer. The MCP SDK gives a host their JSON Schema and validates each call against them.
 */

/** The longest `waitSeconds` of `troupe_get`: below the 60 s a client waits for an answer by default. */
export const MAX_GET_WAIT_SECONDS = 50;

/** What the long-task tools answer: where a task stands, and what it waits on. */
export const McpTaskState = z.object({
  taskId: z.string(),
  pipeline: z.string(),
  status: z.enum(['submitted', 'running', 'completed', 'failed', 'cancelled']),
  /** The output, once it completed. */
  output: z.unknown().optional(),
  failure: z.object({ reason: z.string(), message: z.string() }).optional(),
  /** Set while a person holds the running task (`troupe_pause`): since when, by whom, why. */
  paused: z
    .object({ since: z.string(), by: z.string().optional(), reason: z.string().optional() })
    .optional(),
  /** Approvals and questions it waits on now, each with how to settle it. */
  waitingFor: z.array(
    z.object({ id: z.string(), kind: z.enum(['approval', 'question']), prompt: z.string(), how: z.string() }),
  ),
  trace: z.string(),
});
export type McpTaskState = z.infer<typeof McpTaskState>;

/** `troupe_start`'s input: a task of one of `pipelines` (those the caller may submit to). */
export const startToolInput = (pipelines: readonly [string, ...string[]]) =>
  z.object({
    pipeline: z.enum(pipelines).describe('the pipeline to run'),
    goal: z.string().min(1).describe('what the task should achieve'),
    input: z.record(z.string(), z.unknown()).optional().describe("the pipeline's structured input"),
  });

/** `troupe_get`'s input. */
export const GetToolInput = z.object({
  taskId: z.string().min(1).describe('as troupe_start answered'),
  waitSeconds: z
    .number()
    .min(0)
    .max(MAX_GET_WAIT_SECONDS)
    .optional()
    .describe('wait up to this long for the task to end'),
});
export type GetToolInput = z.infer<typeof GetToolInput>;

/** `troupe_cancel`'s input. */
export const CancelToolInput = z.object({
  taskId: z.string().min(1).describe('as troupe_start answered'),
  reason: z.string().max(1_000).optional().describe('why, recorded with the cancel'),
});
export type CancelToolInput = z.infer<typeof CancelToolInput>;

/** `troupe_tell`'s input. */
export const TellToolInput = z.object({
  taskId: z.string().min(1).describe('as troupe_start answered'),
  text: z
    .string()
    .trim()
    .min(1)
    .max(100_000)
    .describe('what to tell the agent at work: it reads it before its next model call'),
  idempotencyKey: z
    .string()
    .min(1)
    .max(200)
    .optional()
    .describe('any unique string (a uuid): calling again with it, after an error, tells the task only once'),
});
export type TellToolInput = z.infer<typeof TellToolInput>;

/** What `troupe_tell` answers: the message's id, as the task's `task.told` and `agent.told` events name it. */
export const TellToolResult = z.object({ taskId: z.string(), messageId: z.string() });
export type TellToolResult = z.infer<typeof TellToolResult>;

/** `troupe_pause`'s input. */
export const PauseToolInput = z.object({
  taskId: z.string().min(1).describe('as troupe_start answered'),
  reason: z
    .string()
    .max(2_000)
    .optional()
    .describe('why, recorded with the pause and shown to whoever resumes it'),
});
export type PauseToolInput = z.infer<typeof PauseToolInput>;

/** `troupe_resume`'s input. */
export const ResumeToolInput = z.object({
  taskId: z.string().min(1).describe('a task troupe_pause (or a person) paused'),
});
export type ResumeToolInput = z.infer<typeof ResumeToolInput>;

/** What `troupe_pause` and `troupe_resume` answer: the task's steering state once the change is recorded. */
export const SteerToolResult = z.object({ taskId: z.string(), status: z.enum(['paused', 'running']) });
export type SteerToolResult = z.infer<typeof SteerToolResult>;

const FamilyKey = z
  .string()
  .min(1)
  .max(200)
  .optional()
  .describe(
    'any unique string (a uuid): calling again with it, after an error, makes the new task only once',
  );

const Newest = z
  .boolean()
  .optional()
  .describe(
    "run on the pipeline's newest version (after a fix to a prompt or tool), not the one the original ran on",
  );

/** `troupe_restart`'s input. */
export const RestartToolInput = z.object({
  taskId: z.string().min(1).describe('a failed or cancelled task'),
  from: z.string().min(1).max(64).describe('the step to run again, with every step after it'),
  newest: Newest,
  idempotencyKey: FamilyKey,
});
export type RestartToolInput = z.infer<typeof RestartToolInput>;

/** `troupe_fork`'s input. */
export const ForkToolInput = z.object({
  taskId: z.string().min(1).describe('an ended task (completed, failed or cancelled)'),
  at: z.string().min(1).max(64).describe('the step to run on from, with the edits'),
  input: z
    .record(z.string(), z.unknown())
    .optional()
    .describe("the new task's input, in place of the original's: people the original asked are asked again"),
  set: z
    .record(z.string().min(1).max(64), z.string().max(100_000))
    .optional()
    .describe(
      "outputs to replace, by step id: each a step that completed before `at` started (not a person's answer)",
    ),
  newest: Newest,
  idempotencyKey: FamilyKey,
});
export type ForkToolInput = z.infer<typeof ForkToolInput>;

/** What `troupe_restart` and `troupe_fork` answer: the new task (read it with `troupe_get`) and the one it came from. */
export const FamilyToolResult = z.object({
  taskId: z.string(),
  origin: z.object({ taskId: z.string(), kind: z.enum(['restart', 'fork']), step: z.string() }),
});
export type FamilyToolResult = z.infer<typeof FamilyToolResult>;
