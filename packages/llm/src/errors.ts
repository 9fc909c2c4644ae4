/** Why a model call failed. `retryable` says whether trying again may succeed. */
export type ModelErrorCode =
  | 'script_exhausted'
  | 'scripted_failure'
  | 'rate_limited'
  | 'server_error'
  | 'timeout'
  | 'connection'
  | 'bad_request'
  | 'auth'
  | 'not_found'
  | 'invalid_response'
  | 'aborted'
  | 'config';

/** A failed model call, with a stable code and the provider's own message. */
export class ModelError extends Error {
  override readonly name = 'ModelError';
  readonly code: ModelErrorCode;
  readonly retryable: boolean;

  constructor(code: ModelErrorCode, message: string, options?: { retryable?: boolean; cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.retryable = options?.retryable ?? false;
  }
}
