import type { StepErrorCode } from '@troupe/protocol';

/**
 * A call to a remote A2A agent that went wrong, with the step error code it fails the step with. `retryable` marks
 * faults that may pass (the network, 429, 5xx, a request that ran out of time): tried again, with backoff.
 */
export class A2aCallError extends Error {
  override readonly name = 'A2aCallError';
  readonly code: StepErrorCode;
  readonly retryable: boolean;

  constructor(code: StepErrorCode, message: string, options: { retryable?: boolean; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.retryable = options.retryable ?? false;
  }

  static is(error: unknown): error is A2aCallError {
    return error instanceof A2aCallError;
  }
}
