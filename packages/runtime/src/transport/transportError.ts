/** Stable codes of transport failures. A request answered with an `ErrorReply` carries the replier's own code. */
export type TransportErrorCode =
  | 'connect_failed'
  | 'bucket_missing'
  | 'no_responders'
  | 'timeout'
  | 'stalled'
  | 'invalid_reply'
  | 'aborted'
  | 'closed'
  | 'request_failed'
  | 'jetstream_unavailable'
  | 'stream_setup_failed'
  /** The NATS server refused this client's user a subject it needed (its permissions). */
  | 'permission_denied'
  | 'nats_server_missing'
  | 'nats_server_failed'
  | 'unencodable'
  | (string & {});

/** A failure to talk over NATS or to run a local nats-server, with a stable `code` and the underlying `cause`. */
export class TransportError extends Error {
  override readonly name = 'TransportError';
  readonly code: TransportErrorCode;

  constructor(code: TransportErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }

  /** True when `error` is a TransportError, and of `code` when one is given. */
  static is(error: unknown, code?: TransportErrorCode): error is TransportError {
    return error instanceof TransportError && (code === undefined || error.code === code);
  }
}
