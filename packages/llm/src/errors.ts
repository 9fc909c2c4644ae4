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
  /** HTTP status, when the provider answered with one. */
  readonly status: number | undefined;
  /** How long the provider asked us to wait (`retry-after`), in milliseconds. */
  readonly retryAfterMs: number | undefined;

  constructor(
    code: ModelErrorCode,
    message: string,
    options?: { retryable?: boolean; cause?: unknown; status?: number; retryAfterMs?: number },
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.retryable = options?.retryable ?? false;
    this.status = options?.status;
    this.retryAfterMs = options?.retryAfterMs;
  }
}
