import {
  A2A_ERROR_CODE,
  A2AError,
  RequestMalformedError,
  restStatusFor,
  toJsonRpcError,
  toRestErrorBody,
} from '@a2a-js/sdk/errors';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AuthRefusal } from '../auth.ts';
import { ServiceUnavailable, TransportRefusal, unavailableOf } from './a2aErrors.ts';
import { internalError } from './guardedHandler.ts';
import { RestRouteMissing } from './restBinding.ts';

/** A2A's own media type, which its answers carry and its requests may. */
export const A2A_CONTENT_TYPE = 'application/a2a+json';

/**
 * How an A2A request refused or failed before its handler ran is answered in each binding's own form: JSON-RPC's
 * envelope, HTTP+JSON's `google.rpc.Status`, or the gateway's plain error for the cards. A refusal is logged with
 * why; a fault is logged and answered as an internal error with the request's id.
 */

export function rpcError(id: string | number | null, error: unknown) {
  const own = (error as { rpcCode?: number }).rpcCode;
  const mapped = toJsonRpcError(error);
  return { jsonrpc: '2.0', id, error: own === undefined ? mapped : { ...mapped, code: own } };
}

/** A refusal or an A2A error for what was thrown before the handler ran; undefined for a fault. */
function transportError(error: unknown): Error | undefined {
  if (error instanceof TransportRefusal || error instanceof A2AError) return error;
  if (error instanceof AuthRefusal)
    return new TransportRefusal(error.status, error.message, { cause: error });
  if ((error as { statusCode?: unknown }).statusCode === 429) {
    return new TransportRefusal(429, (error as Error).message, { cause: error });
  }
  if (error instanceof RestRouteMissing) return error;
  if (error instanceof URIError) return new RequestMalformedError(`the path is not valid: ${error.message}`);
  return unavailableOf(error);
}

/** The HTTP+JSON binding's error answer: the spec's status and `google.rpc.Status` body. */
export function restErrorBody(error: unknown): { status: number; body: unknown } {
  if (error instanceof TransportRefusal) {
    return {
      status: error.status,
      body: { error: { code: error.status, status: error.restStatus, message: error.message, details: [] } },
    };
  }
  if (error instanceof RestRouteMissing) {
    const status = error.status === 404 ? 'NOT_FOUND' : 'UNIMPLEMENTED';
    return {
      status: error.status,
      body: { error: { code: error.status, status, message: error.message, details: [] } },
    };
  }
  if (error instanceof ServiceUnavailable) {
    return {
      status: 503,
      body: { error: { code: 503, status: 'UNAVAILABLE', message: error.message, details: [] } },
    };
  }
  const status = restStatusFor(error);
  return { status, body: toRestErrorBody(error, status) };
}

/** A JSON-RPC answer that carries a token's refusal: sent with the refusal's HTTP status. */
export function refusalIn(answer: unknown): { status: number } | undefined {
  const code = (answer as { error?: { code?: number } }).error?.code;
  if (code === undefined) return undefined;
  const statuses: Record<number, number> = { [-32040]: 401, [-32041]: 403, [-32042]: 429 };
  const status = statuses[code];
  return status === undefined ? undefined : { status };
}

export const isStream = (value: unknown): value is AsyncGenerator<unknown> =>
  typeof (value as { [Symbol.asyncIterator]?: unknown })?.[Symbol.asyncIterator] === 'function';

export function sendRpcRefusal(
  request: FastifyRequest,
  reply: FastifyReply,
  id: string | number | null,
  error: unknown,
) {
  const mapped = transportError(error);
  if (mapped instanceof TransportRefusal) {
    logRefusal(request, mapped);
    return reply.code(mapped.status).send({
      jsonrpc: '2.0',
      id,
      error: { code: mapped.envelopeCode, message: mapped.message },
    });
  }
  return reply.send(rpcError(id, mapped ?? unexpected(request, error)));
}

export function sendRestError(request: FastifyRequest, reply: FastifyReply, error: unknown) {
  const mapped = transportError(error) ?? unexpected(request, error);
  if (mapped instanceof TransportRefusal) logRefusal(request, mapped);
  const { status, body } = restErrorBody(mapped);
  return reply.code(status).type(A2A_CONTENT_TYPE).send(body);
}

export function sendPlainError(request: FastifyRequest, reply: FastifyReply, error: unknown) {
  const mapped = transportError(error) ?? unexpected(request, error);
  if (mapped instanceof TransportRefusal) logRefusal(request, mapped);
  const status =
    mapped instanceof TransportRefusal ? mapped.status : mapped instanceof ServiceUnavailable ? 503 : 500;
  return reply
    .code(status)
    .send({ error: { code: status === 503 ? 'unavailable' : 'refused', message: mapped.message } });
}

function unexpected(request: FastifyRequest, error: unknown): Error {
  request.log.error({ err: error, route: request.routeOptions.url }, 'A2A request failed');
  return internalError(request.id);
}

function logRefusal(request: FastifyRequest, refusal: TransportRefusal) {
  request.log.warn(
    { method: request.method, route: request.routeOptions.url, reason: refusal.message },
    `refused ${request.method} ${request.routeOptions.url}: ${refusal.message}`,
  );
}

/**
 * What is refused before a handler runs is answered in the binding's own form: the gateway's check of every request
 * (another Host on a gateway without tokens: logged there) as the same refusal in a handler is, and what Fastify
 * refuses (a body over its limit) as an invalid request.
 */
export function answerFastifyRefusals(app: FastifyInstance): void {
  app.setErrorHandler((thrown, request, reply) => {
    if (thrown instanceof AuthRefusal) return answerRefusal(request, reply, thrown);
    const error = thrown as { statusCode?: unknown; message?: string };
    const status = typeof error.statusCode === 'number' && error.statusCode >= 400 ? error.statusCode : 500;
    if (status >= 500)
      request.log.error({ err: error, route: request.routeOptions.url }, 'A2A request failed');
    const message = status >= 500 ? `internal error (request ${request.id})` : (error.message ?? 'refused');
    if (request.routeOptions.url?.endsWith('/jsonrpc')) {
      return reply
        .code(status)
        .send({ jsonrpc: '2.0', id: null, error: { code: A2A_ERROR_CODE.INVALID_REQUEST, message } });
    }
    return reply.code(status).send({
      error: { code: status, status: status >= 500 ? 'INTERNAL' : 'INVALID_ARGUMENT', message, details: [] },
    });
  });
}

function answerRefusal(request: FastifyRequest, reply: FastifyReply, error: AuthRefusal) {
  const refusal = new TransportRefusal(error.status, error.message, { cause: error });
  const url = request.routeOptions.url ?? '';
  if (url.endsWith('/jsonrpc')) {
    return reply
      .code(refusal.status)
      .send({ jsonrpc: '2.0', id: null, error: { code: refusal.envelopeCode, message: refusal.message } });
  }
  if (url.includes('/rest/')) {
    const { status, body } = restErrorBody(refusal);
    return reply.code(status).type(A2A_CONTENT_TYPE).send(body);
  }
  return reply.code(refusal.status).send({ error: { code: 'refused', message: refusal.message } });
}
