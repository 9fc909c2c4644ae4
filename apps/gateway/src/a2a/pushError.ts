/** Stable codes of the A2A server's push-notification failures. */
export type PushErrorCode =
  /** The config itself is wrong: no URL, an id that is not a safe key, a task id of another task. */
  | 'invalid_config'
  /** The webhook URL is refused: not http(s), or a host the gateway's policy keeps webhooks away from. */
  | 'url_refused'
  /** The config store or the delivery queue on NATS cannot be reached or written. */
  | 'unavailable';

/**
 * A push-notification config refused, or one that could not be stored; `statusCode` 400 for what the caller can
 * fix (so the gateway's HTTP layer answers it as a bad request), 503 for NATS trouble.
 */
export class PushError extends Error {
  override readonly name = 'PushError';
  readonly code: PushErrorCode;

  constructor(code: PushErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }

  get statusCode(): number {
    return this.code === 'unavailable' ? 503 : 400;
  }

  /** True when `error` is a PushError, and of `code` when one is given. */
  static is(error: unknown, code?: PushErrorCode): error is PushError {
    return error instanceof PushError && (code === undefined || error.code === code);
  }
}
