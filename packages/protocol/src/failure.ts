import { z } from 'zod';

/**
 * Why a step failed: the `error.code` of an `AgentStepReply` with `ok: false`, or the code of the workflow's request
 * for the step when no reply came. A reply whose code this version does not know is read as `failed` (see
 * `StepError`).
 */
export const StepErrorCode = z.enum([
  /** The agent failed without saying why; also what a code unknown to this version is read as. */
  'failed',
  /** The agent reached its `maxTurns` model calls without finishing. */
  'max_steps',
  /** The model returned an empty reply with no tool calls. */
  'empty_reply',
  /** No verdict, or no reply matching the agent's `output` schema, after the repair turn. */
  'invalid_output',
  /** The conversation outgrew the agent's `contextTokens` and the summary call failed. */
  'compaction_failed',
  /** Checking, approving or running the turn's tool calls failed (a tool's own error goes to the model). */
  'tool_runner_failed',
  /** The host could not reach the step journal; the workflow sends the step again. */
  'journal_unavailable',
  /** A limit of the request's `budget` was reached, or its `deadline` passed. */
  'budget_exceeded',
  /** The step ran past its `timeoutMs`. */
  'step_timeout',
  /** The step ran past its `timeoutMs` while waiting for a person. */
  'approval_timeout',
  /** The step or its model call was stopped: the task was cancelled or ended, or nobody waits for the step. */
  'aborted',
  /** The agent host failed while running the step. */
  'agent_crashed',
  /** The step reached a host that does not serve its pipeline and agent. */
  'misrouted',
  /** The agent declares a tool nobody registered on its host; the step did not start. */
  'unknown_tool',
  /** The host stopped mid-step; the workflow sends the step to another worker. */
  'worker_stopped',
  /**
   * The step's task was paused: its agent stopped after its current model or tool call, everything so far in its
   * journal. The workflow holds the step and sends it again (the journal answering what was done) on resume.
   */
  'paused',
  /** The model kept answering 429, through its retries and fallbacks. */
  'rate_limited',
  /** The model kept answering 409 or 5xx. */
  'server_error',
  /** In a reply, a model request that ran out of time; of the request for the step, no reply in time. */
  'timeout',
  /** The model's endpoint could not be reached. */
  'connection',
  /** The provider refused the request (400 and the like). */
  'bad_request',
  /** The provider refused the credentials (401, 403). */
  'auth',
  /** The provider does not know the model (404). */
  'not_found',
  /** The model's answer could not be used. */
  'invalid_response',
  /** The model is configured wrongly, or no model was left to call. */
  'config',
  /** The scripted model has no reply left. */
  'script_exhausted',
  /** The scripted model was told to fail. */
  'scripted_failure',
  /** The model call failed with an error that has no code this version knows. */
  'model_failed',
  /** The step names a pipeline version its host cannot load (not stored), or whose agents do not include it. */
  'version_unavailable',
  /** The task's workspace passed a limit (a file's size, the task's total, the number of files): not handed on. */
  'workspace_too_large',
  /** Of the request for the step: nobody serves the agent (yet). Never in a reply. */
  'no_responders',
  /** Of the request for the step: its host sent neither heartbeats nor a reply. Never in a reply. */
  'stalled',
]);
export type StepErrorCode = z.infer<typeof StepErrorCode>;

/** True when `value` is a step error code this version knows. */
export const isStepErrorCode = (value: unknown): value is StepErrorCode =>
  StepErrorCode.safeParse(value).success;

/** Why a task failed: the `reason` of `task.failed`. */
export const TaskFailureReason = z.enum([
  /** A step replied `ok: false` with a code that is no reason of its own (a model failure included). */
  'step_failed',
  /** A step ended `budget_exceeded`. */
  'budget_exceeded',
  /** A step ran past its timeout. */
  'step_timeout',
  /** A step ran past its timeout while waiting for a person. */
  'approval_timeout',
  /** No agent host served the step's agent in time. */
  'no_worker',
  /** A review rejected the work in all its rounds (`onMaxRounds: fail`). */
  'max_rounds',
  /**
   * A review step replied without a verdict, a step's reply missed its agent's `output` schema after the repair turn
   * (a router agent's naming no target among them), or a person's answers kept missing a `human` step's schema.
   */
  'invalid_output',
  /** A step's `when` or a route's `on` could not be evaluated, or a route's value matched no case. */
  'condition_failed',
  /** Any other failure to reach the step's agent over NATS. */
  'transport',
  /** The workflow actor crashed. */
  'internal',
  /** The workflow's checkpoint could not be made or encoded. */
  'checkpoint_failed',
  /** A redelivered task's checkpoint no longer fits the pipeline as loaded now. */
  'unresumable',
  /** The task message was delivered `maxDeliver` times in a row without progress. */
  'max_deliveries',
  /**
   * A task its submitter marked queued (through the gateway) was refused before it ran: over the coordinator's
   * limits, its input not fitting the pipeline's input schema, or its stored input unreadable. An unmarked one is
   * only reported on `_invalid`.
   */
  'refused',
]);
export type TaskFailureReason = z.infer<typeof TaskFailureReason>;

/**
 * Failures that do not end the step: the host lost its journal, the worker stopped mid-step or went silent, the
 * task was paused, or nobody serves the agent yet. The workflow sends the step again with the same id, within the step's timeout.
 */
const RETRYABLE: ReadonlySet<StepErrorCode> = new Set([
  'journal_unavailable',
  'worker_stopped',
  // Held, not failed: the workflow sends it again when the task is resumed.
  'paused',
  'stalled',
  'no_responders',
]);

/** True when the workflow sends a step that failed with `code` again rather than failing the task. */
export function isRetryable(code: StepErrorCode): boolean {
  return RETRYABLE.has(code);
}

/** Where a step's failure showed: in the agent's reply, or as the request for the step failing. */
export type StepFailureSource = 'reply' | 'call';

/** Codes that are a task failure reason of their own; any other is {@link OTHER_FAILURE}'s. */
const OWN_REASONS: Record<StepFailureSource, Partial<Record<StepErrorCode, TaskFailureReason>>> = {
  reply: {
    budget_exceeded: 'budget_exceeded',
    invalid_output: 'invalid_output',
    step_timeout: 'step_timeout',
    approval_timeout: 'approval_timeout',
  },
  call: {
    no_responders: 'no_worker',
    timeout: 'step_timeout',
    step_timeout: 'step_timeout',
    approval_timeout: 'approval_timeout',
  },
};

const OTHER_FAILURE: Record<StepFailureSource, TaskFailureReason> = {
  reply: 'step_failed',
  call: 'transport',
};

/**
 * The reason a task fails with when a step fails with `code`: from a reply, `budget_exceeded`, `step_timeout`,
 * `approval_timeout` and `invalid_output` are their own reason and any other code is `step_failed`; from the request for the step,
 * `no_responders` is `no_worker`, `timeout` is `step_timeout`, the two step timeouts are their own, and anything
 * else (`undefined`: a code this version does not know) is `transport`.
 *
 * @example
 * taskFailureReason('rate_limited'); // 'step_failed'
 * taskFailureReason('no_responders', 'call'); // 'no_worker'
 */
export function taskFailureReason(
  code: StepErrorCode | undefined,
  from: StepFailureSource = 'reply',
): TaskFailureReason {
  return (code === undefined ? undefined : OWN_REASONS[from][code]) ?? OTHER_FAILURE[from];
}

/** What an error says, for a message: its `message`, or the thrown value as text when it is not an `Error`. */
export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
