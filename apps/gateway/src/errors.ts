import { OperationError, type OperationErrorCode } from '@troupe/client';
import { GatewayError } from './gatewayError.ts';

/** What an error a request ran into is answered with, over HTTP or a WebSocket. */
export interface ErrorAnswer {
  status: number;
  code: string;
  message: string;
}

const STATUS_OF: Record<OperationErrorCode, number> = {
  not_found: 404,
  wrong_kind: 409,
  conflict: 409,
  no_coordinator: 503,
  unavailable: 503,
  invalid_request: 400,
  too_large: 413,
};

/** Fastify's own refusals (a body that is not JSON, too large, of another type) get our codes. */
const CLIENT_ERROR_CODES: Record<number, string> = {
  400: 'invalid_request',
  413: 'too_large',
  415: 'unsupported_media_type',
};

/**
 * The answer to an error the gateway expects — its own refusals, an operation that changed nothing, a request
 * Fastify refuses (any error with a 4xx `statusCode`) — or undefined for one it does not: that one is a 500, and logged.
 */
export function answerTo(error: unknown): ErrorAnswer | undefined {
  if (GatewayError.is(error)) return { status: error.statusCode, code: error.code, message: error.message };
  if (OperationError.is(error))
    return { status: STATUS_OF[error.code], code: error.code, message: error.message };
  const status = (error as { statusCode?: unknown } | undefined)?.statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500) {
    const code = CLIENT_ERROR_CODES[status] ?? (error as { code?: string }).code ?? 'bad_request';
    return { status, code, message: (error as Error).message };
  }
  return undefined;
}
