import { ControlRefusal, type ErrorReply, StepErrorCode } from '@troupe/protocol';

/**
 * Codes a responder's `ErrorReply` carries that this version knows: the bus's own answers (`invalid_message`,
 * `handler_failed`, `invalid_subject`), a person's request already decided, the refusals of a control message, and
 * the step error codes an agent host refuses a step with (`misrouted`, `version_unavailable`, …).
 * A request answered with one of them fails with it as its code; any other code is read as `refused`.
 */
const REPLY_CODES = new Set<string>([
  'invalid_message',
  'handler_failed',
  'invalid_subject',
  'already_decided',
  ...ControlRefusal.options,
  ...StepErrorCode.options,
]);
export type ReplyErrorCode =
  | 'invalid_message'
  | 'handler_failed'
  | 'invalid_subject'
  | 'already_decided'
  | ControlRefusal
  | StepErrorCode;

/** Stable codes of transport failures, and of the refusals a request may be answered with (see {@link ReplyErrorCode}). */
export type TransportErrorCode =
  | 'connect_failed'
  | 'bucket_missing'
  /** A JetStream stream Troupe needs (`TASKS`, `EVENTS`) does not exist on the server. */
  | 'stream_missing'
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
  /** A value could not be encoded for a KV bucket. */
  | 'unencodable'
  /** A JetStream operation was given a bus that is not over NATS (only `NatsBus` is). */
  | 'not_nats'
  /** The responder refused the request with a code this version does not know; the message names it. */
  | 'refused'
  | ReplyErrorCode;

/**
 * What marks a {@link TransportError}, for {@link TransportError.is}: a registered symbol, the same in every copy of
 * this module. The CLI bundles each command apart (scripts/buildCli.mjs): `troupe up --gateway` hands the bus up's
 * bundle made to the gateway's bundle, whose client would not know the errors of that bus by `instanceof`.
 */
const TRANSPORT_ERROR = Symbol.for('troupe.TransportError');

/** A failure to talk over NATS or to run a local nats-server, with a stable `code` and the underlying `cause`. */
export class TransportError extends Error {
  override readonly name = 'TransportError';
  readonly code: TransportErrorCode;

  /** On the prototype, not each error: a printed error (`util.inspect`, an uncaught one) shows no marker. */
  get [TRANSPORT_ERROR](): true {
    return true;
  }

  constructor(code: TransportErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }

  /** True when `error` is a TransportError (made by any copy of this module), and of `code` when one is given. */
  static is(error: unknown, code?: TransportErrorCode): error is TransportError {
    return (
      typeof error === 'object' &&
      error !== null &&
      TRANSPORT_ERROR in error &&
      (code === undefined || (error as TransportError).code === code)
    );
  }

  /** The failure of a request its responder answered with `reply`: its code when known, else `refused`. */
  static fromReply(reply: ErrorReply): TransportError {
    const { code, message } = reply.error;
    if (isReplyErrorCode(code)) return new TransportError(code, message);
    return new TransportError('refused', `refused (${code}): ${message}`);
  }
}

function isReplyErrorCode(code: string): code is ReplyErrorCode {
  return REPLY_CODES.has(code);
}
