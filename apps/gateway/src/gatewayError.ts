/**
 * The stable codes of the gateway's own refusals, as the error bodies and WebSocket replies carry them: a client may
 * switch on them. (Refusals of an operation on a task carry the client's `OperationError` codes instead.)
 */
export type GatewayErrorCode =
  | 'invalid_request'
  | 'unauthenticated'
  | 'forbidden'
  | 'too_many_streams'
  | 'too_many_consumers'
  | 'too_many_subscriptions'
  | 'workspace_not_here'
  | 'too_large';

/**
 * A request the gateway refuses, with the HTTP status it is answered with and a message that says what to do. The
 * gateway's error handler answers each as `{ error: { code, message } }`; a WebSocket as a reply with `ok: false`.
 */
export class GatewayError extends Error {
  override readonly name: string = 'GatewayError';
  readonly code: GatewayErrorCode;
  /** The HTTP status (Fastify's name for it, so a refusal thrown before a handler runs is answered so too). */
  readonly statusCode: number;

  constructor(code: GatewayErrorCode, statusCode: number, message: string, options?: ErrorOptions) {
    super(message, options);
    this.code = code;
    this.statusCode = statusCode;
  }

  static is(error: unknown): error is GatewayError {
    return error instanceof GatewayError;
  }
}
