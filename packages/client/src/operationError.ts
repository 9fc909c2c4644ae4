/**
 * Why an operation on a running Troupe (submit, cancel, decide, read) changed nothing. The CLI turns it into a
 * message and an exit code, the gateway into an HTTP status with the code in its body.
 *
 * - `not_found`: no such task, pipeline or request.
 * - `wrong_kind`: the request is a question where an approval was meant, or the other way round.
 * - `conflict`: the task or request is past the point the operation needs (ended, decided, expired), or not in the
 *   state it needs (a pause of a paused task, a resume of one not paused).
 * - `no_coordinator`: nothing on the server runs Troupe, or no coordinator answered for the task.
 * - `unavailable`: NATS or JetStream did not answer in time, or no coordinator runs the task right now (it runs
 *   again when its message is delivered again).
 * - `invalid_request`: what was asked for is refused as it is (a task deeper than the limits), with the reason.
 * - `too_large`: a task, or its input, larger than the limits.
 */
export type OperationErrorCode =
  | 'not_found'
  | 'wrong_kind'
  | 'conflict'
  | 'no_coordinator'
  | 'unavailable'
  | 'invalid_request'
  | 'too_large';

export class OperationError extends Error {
  readonly code: OperationErrorCode;

  constructor(code: OperationErrorCode, message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'OperationError';
    this.code = code;
  }

  /** Checked by shape, not class: a bundle may carry a copy of this class of its own. */
  static is(error: unknown, code?: OperationErrorCode): error is OperationError {
    return (
      error instanceof Error &&
      error.name === 'OperationError' &&
      typeof (error as { code?: unknown }).code === 'string' &&
      (code === undefined || (error as { code?: unknown }).code === code)
    );
  }
}
