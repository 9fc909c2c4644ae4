/**
 * Why a step was stopped when it ran past its timeout: given as the abort reason, so what the step was waiting on (a
 * person's decision, a tool) closes as run out of time. Named `TimeoutError`, as the reason `AbortSignal.timeout`
 * gives is, so either reads the same.
 */
export class StepTimedOutError extends Error {
  override readonly name = 'TimeoutError';
  readonly code = 'step_timeout';

  constructor(stepId: string) {
    super(`step ${stepId} ran out of time`);
  }
}
