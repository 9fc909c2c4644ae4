import { z } from 'zod';
import { isStepErrorCode, type StepErrorCode } from './failure.ts';
import { Name, TaskId } from './names.ts';
import { UsageTotals } from './usage.ts';
import { InputCut, ValueRef } from './valueRef.ts';
import { WorkspaceChanges, WorkspaceManifest } from './workspace.ts';

/** A reviewer's decision on the work so far. */
export const Verdict = z.strictObject({
  decision: z.enum(['approve', 'reject']),
  /** What must change (on reject) or a short note (on approve). */
  feedback: z.string().default(''),
});
export type Verdict = z.infer<typeof Verdict>;

/** The output of an earlier step, handed to later ones. */
export const StepOutput = z.object({
  step: z.string(),
  agent: Name,
  round: z.number().int().positive(),
  /** The output, or its preview when it is too large for a message (then `outputRef` says where the whole is). */
  output: z.string(),
  outputRef: ValueRef.optional(),
});
export type StepOutput = z.infer<typeof StepOutput>;

/** What a step must return: free text, or a reviewer's verdict. */
export const StepExpect = z.enum(['text', 'verdict']);
export type StepExpect = z.infer<typeof StepExpect>;

/**
 * What a step may still spend: the tighter of what is left of the task's budget and of the agent's. Checked
 * before each model call; a step that would pass a limit ends with `budget_exceeded`, naming the limit.
 */
export const StepBudget = z.object({
  /** Input plus output tokens. */
  tokens: z.number().nonnegative().optional(),
  costUsd: z.number().nonnegative().optional(),
  modelCalls: z.number().int().nonnegative().optional(),
  /** Wall-clock end of the task, ms since the epoch. */
  deadline: z.number().int().optional(),
  /** Which budget each limit comes from, for the message: e.g. `{ tokens: "task maxTokens 20000" }`. */
  sources: z.record(z.string(), z.string()).default({}),
});
export type StepBudget = z.infer<typeof StepBudget>;

/**
 * The longest delay a Node timer keeps (2^31 - 1 ms, about 24.8 days): a longer one fires after 1 ms, so one
 * request asking for it would make its host beat or time out at once, over and over.
 */
export const MAX_TIMER_MS = 2_147_483_647;
/** The shortest heartbeat a step may ask for: below it a host would spend itself on heartbeats. */
export const MIN_HEARTBEAT_MS = 10;

/**
 * A person's message to a running task (`troupe tell`): the agent at work reads it before its next model call, as
 * a user turn; when no step is at work, the next agent step does. `id` is unique per task and stable: a step sent
 * again with the same message takes it once.
 */
export const ToldMessage = z.object({
  id: z.string().min(1).max(100),
  text: z.string().min(1).max(100_000),
  by: z.string().max(200).optional(),
  /** ISO-8601 time the task's coordinator took it. */
  at: z.string(),
});
export type ToldMessage = z.infer<typeof ToldMessage>;

/** A step for an agent, sent by a workflow on `troupe.agents.<pipeline>.<agent>`. */
export const AgentStepRequest = z.object({
  /** Deterministic: `<taskId>.<step>.<round>`; the same step resent has the same id. */
  stepId: z.string().min(1).max(200),
  taskId: TaskId,
  pipeline: Name,
  agent: Name,
  step: z.string().min(1),
  round: z.number().int().positive(),
  goal: z.string(),
  input: z.record(z.string(), z.unknown()).optional(),
  /** Keys of `input` that hold only a preview of a stored input: the host reads the whole back before the step runs. */
  inputCut: InputCut.optional(),
  /** Outputs of the earlier steps this step was given, oldest first. */
  context: z.array(StepOutput),
  /** The reviewer's feedback when work is sent back. */
  feedback: z.string().optional(),
  /**
   * Messages people told the task that no finished step has read yet, oldest first: the agent reads each one not
   * already in its journal before its next model call. Messages told while the step runs reach its host as
   * `task.told` events too.
   */
  told: z.array(ToldMessage).max(1_000).optional(),
  expect: StepExpect,
  budget: StepBudget.optional(),
  /** How long the workflow waits for the reply; the agent stops the step when it runs out. */
  timeoutMs: z.number().int().positive().max(MAX_TIMER_MS).optional(),
  /**
   * When the workflow sent this request (ms since the epoch, on its coordinator's clock; each send its own). A host
   * compares the task's steering it heard with it: a pause that began, or a message told, at or after it, while the
   * request was on its way, is applied as the step starts. Absent (an older coordinator): none is.
   */
  sentAt: z.number().int().nonnegative().optional(),
  /** Model calls the agent made in the task's earlier steps; numbers its calls in this one (`context.call`). */
  priorModelCalls: z.number().int().nonnegative().optional(),
  /**
   * Asks the host to send `{ stepId, heartbeat: true }` to the reply subject this often while the step runs,
   * so the workflow can tell a slow step from a dead worker and send the step to another one.
   */
  heartbeatMs: z.number().int().min(MIN_HEARTBEAT_MS).max(MAX_TIMER_MS).optional(),
  /**
   * No run of this step can have started before: the task's first delivery sends the step for the first time. The
   * host need not look in the step journal for what an earlier run recorded. Absent on every resend.
   */
  fresh: z.literal(true).optional(),
  /**
   * The hash of the pipeline version the task runs on: the host runs the agent as that version defines it (its
   * prompt, model, tools), loading the version from the `versions` bucket when it is not its own file's. Absent
   * (a workflow from before versions): the host's own definition.
   */
  version: z
    .string()
    .regex(/^[0-9a-f]{64}$/)
    .optional(),
  /** The agent of the previous step, for the handoff trail. */
  from: z.string().optional(),
  traceparent: z.string().optional(),
  /** What this step adds to the agent's instructions (a router's choices, say). */
  instructions: z.string().max(20_000).optional(),
  /** A JSON Schema this step's reply must match, in place of the agent's own `output` (a router's choice). */
  output: z
    .object({ name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/), schema: z.record(z.string(), z.unknown()) })
    .optional(),
  /**
   * The files of the task's workspace that its earlier steps handed on: the host brings its local workspace to
   * this before the step runs, reading each file it lacks from the pipeline's values bucket. Absent: none.
   */
  workspace: WorkspaceManifest.optional(),
});
export type AgentStepRequest = z.infer<typeof AgentStepRequest>;

/** Sent by the host to a step's reply subject while the step runs, when the request asked for heartbeats. */
// Not strict: a field a newer host adds (as `waitingOnModel` was) is dropped, not taken for a broken reply. The
// literal `heartbeat: true` keeps a reply from passing for a heartbeat.
export const StepHeartbeat = z.object({
  stepId: z.string(),
  heartbeat: z.literal(true),
  /** The approval or question the step waits on a person for right now, if any. */
  waitingFor: z.strictObject({ kind: z.enum(['approval', 'question']), id: z.string() }).optional(),
  /** The step has waited a while on a model's reply and does no work meanwhile (the workflow parks the task). */
  waitingOnModel: z.literal(true).optional(),
});
export type StepHeartbeat = z.infer<typeof StepHeartbeat>;

/**
 * Why a step failed, with a stable code. A code this version does not know (a newer host's) is read as `failed`,
 * its message kept and the code added to it, so the reply still ends the step as the host meant: failed.
 */
export const StepError = z
  .object({ code: z.string(), message: z.string() })
  .transform(({ code, message }): { code: StepErrorCode; message: string } =>
    isStepErrorCode(code)
      ? { code, message }
      : { code: 'failed', message: `${message} (error code ${code}, unknown to this version)` },
  );
export type StepError = z.infer<typeof StepError>;

/**
 * Whether a step may have asked a person (an approval, a question) under its task: `false` only when this run asked
 * nobody and no run of the step came before it (its request was `fresh`). The workflow reads the task's requests at
 * its end only when a step may have asked (see docs/durability.md, "Ending"). Absent (an older host, a remote agent):
 * not known, so the end reads them.
 */
const AskedPeople = z.boolean().optional();

/** An agent's reply to a step. */
export const AgentStepReply = z.discriminatedUnion('ok', [
  z.object({
    ok: z.literal(true),
    stepId: z.string(),
    /** The output, or its preview when it is too large for a message (then `outputRef` says where the whole is). */
    output: z.string(),
    outputRef: ValueRef.optional(),
    verdict: Verdict.optional(),
    /** The reply parsed as JSON, when the agent declares an `output` schema. */
    structured: z.unknown().optional(),
    usage: UsageTotals,
    turns: z.number().int().nonnegative(),
    /** What the step changed in the task's workspace, each written file stored in the values bucket first. */
    workspace: WorkspaceChanges.optional(),
    /** The ids of the told messages (see `told`) this step's agent read into its conversation. */
    toldRead: z.array(z.string()).optional(),
    askedPeople: AskedPeople,
  }),
  z.object({
    ok: z.literal(false),
    stepId: z.string(),
    error: StepError,
    usage: UsageTotals,
    turns: z.number().int().nonnegative(),
    /** What the step changed in the task's workspace, each written file stored in the values bucket first. */
    workspace: WorkspaceChanges.optional(),
    /** The ids of the told messages this step's agent read before it stopped (a paused step's, say). */
    toldRead: z.array(z.string()).optional(),
    askedPeople: AskedPeople,
  }),
]);
export type AgentStepReply = z.infer<typeof AgentStepReply>;
