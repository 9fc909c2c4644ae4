import {
  A2AError,
  RequestMalformedError,
  TaskNotFoundError,
  UnsupportedOperationError,
} from '@a2a-js/sdk/errors';
import { OperationError } from '@troupe/client';
import { TransportError } from '@troupe/runtime';
import { InvalidRequest } from '../actions.ts';
import { AuthRefusal } from '../auth.ts';
import { TooManyStreams } from '../streamQuota.ts';

/**
 * A refusal the HTTP layer answers, on either binding, with its own status: no token or the wrong one (401), a token
 * without the scope (403), a token with every stream slot taken (429). The spec leaves the JSON-RPC code of an
 * authentication error to the server: these are Troupe's.
 */
export class TransportRefusal extends A2AError {
  readonly status: 401 | 403 | 429;
  readonly restStatus: 'UNAUTHENTICATED' | 'PERMISSION_DENIED' | 'RESOURCE_EXHAUSTED';
  /** Read by the SDK's JSON-RPC transport: the error's code there. */
  readonly transport = 'jsonrpc';
  readonly envelopeCode: number;

  constructor(status: 401 | 403 | 429, message: string, options?: { cause?: unknown }) {
    super({ message, ...(options?.cause === undefined ? {} : { cause: options.cause }) });
    this.name = 'TransportRefusal';
    this.status = status;
    this.envelopeCode = RPC_CODE_OF[status];
    this.restStatus = REST_STATUS_OF[status];
  }
}

/** JSON-RPC codes of Troupe's own in the server range (-32000 to -32099) beside the spec's -32001 to -32009. */
export const TROUPE_RPC_CODES = {
  unauthenticated: -32040,
  forbidden: -32041,
  tooManyStreams: -32042,
} as const;

const RPC_CODE_OF = {
  401: TROUPE_RPC_CODES.unauthenticated,
  403: TROUPE_RPC_CODES.forbidden,
  429: TROUPE_RPC_CODES.tooManyStreams,
} as const;

const REST_STATUS_OF = {
  401: 'UNAUTHENTICATED',
  403: 'PERMISSION_DENIED',
  429: 'RESOURCE_EXHAUSTED',
} as const;

/** A fault of NATS or of the service (no coordinator, no answer in time): the client may try again later. */
export class ServiceUnavailable extends A2AError {
  constructor(message: string, options?: { cause?: unknown }) {
    super({ message, ...(options?.cause === undefined ? {} : { cause: options.cause }) });
    this.name = 'ServiceUnavailable';
  }
}

/** Transport failures that mean NATS (or what a coordinator sets up on it) is not there now: the client may retry. */
const OUTAGES = new Set([
  'connect_failed',
  'no_responders',
  'timeout',
  'stalled',
  'closed',
  'jetstream_unavailable',
  'bucket_missing',
  'stream_missing',
]);

/**
 * A {@link ServiceUnavailable} for a NATS outage, undefined for anything else. Its message names no server: the
 * cause (with the address) stays in the error, not in the answer.
 */
export function unavailableOf(error: unknown): ServiceUnavailable | undefined {
  if (!TransportError.is(error) || !OUTAGES.has(error.code)) return undefined;
  return new ServiceUnavailable(`the gateway cannot reach NATS now (${error.code}); try again later`, {
    cause: error,
  });
}

/**
 * The A2A error for what a Troupe operation threw: the spec's own where one fits (TaskNotFound, InvalidParams,
 * UnsupportedOperation), a {@link TransportRefusal} for a token's refusal, a {@link ServiceUnavailable} for a NATS
 * outage, and undefined for a fault nobody expects
 * (logged, and answered as an internal error that says nothing of it).
 */
export function a2aErrorOf(error: unknown): Error | undefined {
  if (error instanceof A2AError || error instanceof TransportRefusal) return error;
  if (error instanceof AuthRefusal)
    return new TransportRefusal(error.status, error.message, { cause: error });
  if (error instanceof TooManyStreams) return new TransportRefusal(429, error.message, { cause: error });
  if (error instanceof InvalidRequest)
    return new RequestMalformedError({ message: error.message, cause: error });
  if (OperationError.is(error)) {
    switch (error.code) {
      case 'not_found':
        return new TaskNotFoundError({ message: error.message, cause: error });
      case 'invalid_request':
      case 'too_large':
      case 'wrong_kind':
        return new RequestMalformedError({ message: error.message, cause: error });
      case 'conflict':
        return new UnsupportedOperationError({ message: error.message, cause: error });
      case 'no_coordinator':
      case 'unavailable':
        return new ServiceUnavailable(error.message, { cause: error });
    }
  }
  return unavailableOf(error);
}
