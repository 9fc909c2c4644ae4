import {
  AgentCard,
  CancelTaskRequest,
  DeleteTaskPushNotificationConfigRequest,
  GetTaskPushNotificationConfigRequest,
  GetTaskRequest,
  ListTaskPushNotificationConfigsRequest,
  ListTasksRequest,
  SendMessageRequest,
  StreamResponse,
  SubscribeToTaskRequest,
  TaskPushNotificationConfig,
} from '@a2a-js/sdk';
import {
  A2A_ERROR_CODE,
  A2AError,
  ContentTypeNotSupportedError,
  RequestMalformedError,
  restStatusFor,
  toJsonRpcError,
  toRestErrorBody,
} from '@a2a-js/sdk/errors';
import {
  type A2ARequestHandler,
  JsonRpcTransportHandler,
  ServerCallContext,
  validateVersion,
} from '@a2a-js/sdk/server';
import { CLIENT_WAIT, PipelineRegistry } from '@troupe/client';
import { exceedsDepth, MAX_MESSAGE_DEPTH, type PipelineRegistration } from '@troupe/protocol';
import type { JetStreamBus, Logger } from '@troupe/runtime';
import { ValueStore } from '@troupe/runtime';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { GatewayActions } from '../actions.ts';
import { AuthRefusal, authorize, mayTouch, type Principal, type TokenStore } from '../auth.ts';
import type { OpenStreams } from '../openStreams.ts';
import type { Sessions } from '../sessions.ts';
import { corsHeaders, SseStream } from '../sse.ts';
import type { StreamQuota } from '../streamQuota.ts';
import { TaskIds } from '../taskIds.ts';
import { ServiceUnavailable, TransportRefusal, unavailableOf } from './a2aErrors.ts';
import { type CardOptions, gatewayCard, pipelineCard } from './agentCard.ts';
import { guarded, internalError } from './guardedHandler.ts';
import { type A2aServices, PipelineAgent, SIGNAL_KEY } from './pipelineAgent.ts';
import { PushConfigs } from './pushConfigs.ts';
import type { PushUrlPolicy } from './pushUrls.ts';
import { decode, RestRouteMissing, restCall } from './restBinding.ts';
import { TaskReader } from './taskReader.ts';

export interface A2aRoutesOptions {
  bus: JetStreamBus;
  actions: GatewayActions;
  sessions: Sessions;
  tokens: TokenStore;
  auth: 'tokens' | 'none';
  logger: Logger;
  /** The gateway's URL as clients reach it; else the URL each request came to. */
  publicUrl?: string | undefined;
  /** Push notifications: where webhooks may go; `false` offers none. */
  push: { urlPolicy?: PushUrlPolicy } | false;
  /** The gateway's per-token caps on open streams, and the streams it ends when a token is revoked. */
  streams: { quota: StreamQuota; open: OpenStreams };
  /** The longest a blocking SendMessage waits, in ms (10 minutes). */
  blockingMs?: number;
  /** The gateway's id secret: the same message id from the same token is the same task on every gateway. */
  idSecret?: Uint8Array | string | undefined;
}

/** A2A's routes are described by the A2A spec and the cards, not by the gateway's OpenAPI document. */
const HIDDEN = { schema: { hide: true } };

const ANONYMOUS: Principal = { name: 'anonymous', scopes: ['admin'] };
const A2A_CONTENT_TYPE = 'application/a2a+json';
/** How long CancelTask waits for the coordinator to record the cancel before answering with the task as it is. */
const CANCEL_WAIT_MS = 15_000;

/**
 * The gateway's A2A server (v1.0): every pipeline an A2A agent with its card at `/a2a/<pipeline>/.well-known/
 * agent-card.json` and both bindings (JSON-RPC at `…/jsonrpc`, HTTP+JSON under `…/rest`); the gateway's own card at
 * `/.well-known/agent-card.json`, whose endpoints serve every pipeline by `tenant`. Requests carry the gateway's
 * bearer tokens; a token's scopes and pipelines apply to every method.
 */
export const a2aRoutes: FastifyPluginAsync<A2aRoutesOptions> = async (app, options) => {
  const { bus, logger } = options;
  const push = options.push;
  const services: A2aServices = {
    bus,
    actions: options.actions,
    sessions: options.sessions,
    reader: new TaskReader(bus, new ValueStore(bus)),
    pushConfigs: push === false ? undefined : () => PushConfigs.open(bus, push),
    quota: options.streams.quota,
    ids: options.idSecret === undefined ? TaskIds.random() : new TaskIds(options.idSecret),
    blockingMs: options.blockingMs ?? 600_000,
    cancelWaitMs: CANCEL_WAIT_MS,
  };
  const jsonRpc = (handler: A2ARequestHandler) => new JsonRpcTransportHandler(handler);

  // Bodies are read here, not by the gateway's parser: a JSON-RPC body that is not JSON is answered -32700 in the
  // binding's own form, and A2A's media type is taken beside JSON's.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser(['application/json', A2A_CONTENT_TYPE], { parseAs: 'string' }, (_r, body, done) =>
    done(null, { text: body as string }),
  );
  app.addContentTypeParser('*', { parseAs: 'string' }, (request, _body, done) =>
    done(null, { unsupported: request.headers['content-type'] ?? 'none' }),
  );

  // What Fastify refuses before a handler runs (a body over its limit) is answered in the binding's own form.
  app.setErrorHandler((thrown, request, reply) => {
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

  const cardOptions = (request: FastifyRequest): CardOptions => ({
    baseUrl: (options.publicUrl ?? `${request.protocol}://${request.host}`).replace(/\/+$/, ''),
    bearer: options.auth !== 'none',
    push: push !== false,
  });

  const principal = (request: FastifyRequest): Principal =>
    options.auth === 'none' ? ANONYMOUS : options.tokens.authenticate(request.headers.authorization);

  /** The pipeline's registration, when it is served and the caller may see it; undefined otherwise. */
  const registration = async (
    who: Principal,
    pipeline: string,
  ): Promise<PipelineRegistration | undefined> => {
    if (!mayTouch(who, pipeline)) return undefined;
    return (await PipelineRegistry.open(bus, CLIENT_WAIT)).get(pipeline);
  };

  const serveCard = async (reply: FastifyReply, card: AgentCard) =>
    reply
      .header('cache-control', 'private, max-age=60')
      .type('application/json')
      .send(AgentCard.toJSON(card));

  app.get('/.well-known/agent-card.json', HIDDEN, async (request, reply) => {
    try {
      const who = principal(request);
      authorize(who, 'read');
      const pipelines = (await (await PipelineRegistry.open(bus, CLIENT_WAIT)).all()).filter((p) =>
        mayTouch(who, p.name),
      );
      return await serveCard(reply, gatewayCard(pipelines, cardOptions(request)));
    } catch (error) {
      return sendPlainError(request, reply, error);
    }
  });

  app.get<{ Params: { pipeline: string } }>(
    '/a2a/:pipeline/.well-known/agent-card.json',
    HIDDEN,
    async (request, reply) => {
      try {
        const who = principal(request);
        authorize(who, 'read');
        const found = await registration(who, request.params.pipeline);
        if (!found) {
          return reply.code(404).send({
            error: {
              code: 'not_found',
              message: `no pipeline named ${request.params.pipeline} is served here`,
            },
          });
        }
        return await serveCard(reply, pipelineCard(found, cardOptions(request)));
      } catch (error) {
        return sendPlainError(request, reply, error);
      }
    },
  );

  /** The card a request at an endpoint is served under, for its version check and GetAgentCard. */
  const endpointCard = async (request: FastifyRequest, who: Principal, pipeline: string | undefined) => {
    if (pipeline === undefined) return gatewayCard([], cardOptions(request));
    const found = await registration(who, pipeline);
    return found
      ? pipelineCard(found, cardOptions(request))
      : pipelineCard(
          { name: pipeline, agents: [], steps: [], host: '', registeredAt: '' },
          cardOptions(request),
        );
  };

  /** What every A2A request needs: who asks (refused without a token), the version it speaks, its handler. */
  const prepare = async (
    request: FastifyRequest,
    reply: FastifyReply,
    binding: 'JSONRPC' | 'HTTP+JSON',
    pipeline: string | undefined,
    stopped: AbortController,
  ) => {
    const who = principal(request);
    // A request that waits (a blocking SendMessage) ends, answering the task as it stands, when the gateway closes.
    // Its connection closes with that answer: a closing server waits for every connection, a kept-alive one too.
    const held = () => {
      if (!reply.raw.headersSent) reply.header('connection', 'close');
      stopped.abort();
    };
    const release = options.streams.open.hold(held, who);
    reply.raw.on('close', release);
    if (pipeline !== undefined) authorize(who, 'read', pipeline);
    const card = await endpointCard(request, who, pipeline);
    const requestedVersion = versionOf(request);
    const context = new ServerCallContext({
      user: { isAuthenticated: options.auth !== 'none', userName: who.name },
      ...(requestedVersion === undefined ? {} : { requestedVersion }),
    });
    context.state.set(SIGNAL_KEY, stopped.signal);
    // An absent version is 0.3, which this gateway does not speak: the spec's error says which it does.
    validateVersion(context.requestedVersion, card, binding);
    const handler = guarded(new PipelineAgent(services, { who, pipeline, card }), (error) => {
      request.log.error({ err: error, route: request.routeOptions.url }, 'A2A request failed');
      return internalError(request.id);
    });
    return { who, context, handler };
  };

  const jsonRpcRoute = async (request: FastifyRequest, reply: FastifyReply, pipeline: string | undefined) => {
    const body = request.body as { text?: string; unsupported?: string } | undefined;
    let rpc: Record<string, unknown>;
    try {
      if (body?.unsupported !== undefined) {
        throw new ContentTypeNotSupportedError(
          `content type ${body.unsupported} is not taken: send application/json or ${A2A_CONTENT_TYPE}`,
        );
      }
      rpc = parseRpc(body?.text ?? '');
    } catch (error) {
      return reply.send(rpcError(null, error));
    }
    const id = rpc.id === undefined ? null : (rpc.id as string | number | null);
    const stopped = new AbortController();
    // A client that goes stops what its request waits on (a blocking SendMessage's consumer).
    reply.raw.on('close', () => stopped.abort());
    let prepared: Awaited<ReturnType<typeof prepare>>;
    try {
      prepared = await prepare(request, reply, 'JSONRPC', pipeline, stopped);
      // Its token and version first: a caller without a token learns nothing of the params.
      checkParams(rpc);
    } catch (error) {
      return sendRpcRefusal(request, reply, id, error);
    }
    const answer = await jsonRpc(prepared.handler).handle(rpc, prepared.context);
    if (!isStream(answer)) {
      const refusal = refusalIn(answer);
      if (refusal) return reply.code(refusal.status).send(answer);
      return reply.send(answer);
    }
    return streamOut(request, reply, prepared.who, stopped, answer, {
      first: (error) => sendRpcRefusal(request, reply, id, error),
      event: (item) => item,
      error: (error) => rpcError(id, error),
    });
  };

  app.post('/a2a/jsonrpc', HIDDEN, (request, reply) => jsonRpcRoute(request, reply, undefined));
  app.post<{ Params: { pipeline: string } }>('/a2a/:pipeline/jsonrpc', HIDDEN, (request, reply) =>
    jsonRpcRoute(request, reply, request.params.pipeline),
  );

  const restRoute = async (
    request: FastifyRequest<{ Params: { pipeline?: string; '*': string } }>,
    reply: FastifyReply,
  ) => {
    reply.type(A2A_CONTENT_TYPE);
    const pipeline = request.params.pipeline;
    const stopped = new AbortController();
    reply.raw.on('close', () => stopped.abort());
    try {
      const body = request.body as { text?: string; unsupported?: string } | undefined;
      if (body?.unsupported !== undefined) {
        throw new ContentTypeNotSupportedError(
          `content type ${body.unsupported} is not taken: send ${A2A_CONTENT_TYPE} or application/json`,
        );
      }
      const parsed = body?.text === undefined || body.text === '' ? {} : parseJson(body.text);
      const call = restCall(
        request.method,
        request.params['*'],
        request.query as Record<string, string | undefined>,
        parsed,
      );
      const { who, context, handler } = await prepare(request, reply, 'HTTP+JSON', pipeline, stopped);
      if (call.kind === 'once') {
        const { status, body: answer } = await call.run(handler, context);
        return status === 204 ? reply.code(204).send() : reply.code(status).send(answer);
      }
      return await streamOut(request, reply, who, stopped, call.run(handler, context), {
        first: (error) => sendRestError(request, reply, error),
        event: (item) => StreamResponse.toJSON(item as StreamResponse),
        error: (error) => restErrorBody(error).body,
      });
    } catch (error) {
      return sendRestError(request, reply, error);
    }
  };

  app.all('/a2a/rest/*', HIDDEN, restRoute);
  app.all('/a2a/:pipeline/rest/*', HIDDEN, restRoute);

  /**
   * Streams an answer as Server-Sent Events once its first item is there: an error before it is an ordinary error
   * answer (`first`), one after it an `error` event. Ends when the stream does, the client goes, the gateway
   * closes, or the token is revoked.
   */
  async function streamOut(
    request: FastifyRequest,
    reply: FastifyReply,
    who: Principal,
    stopped: AbortController,
    stream: AsyncGenerator<unknown>,
    write: {
      first: (error: unknown) => unknown;
      event: (item: unknown) => unknown;
      error: (error: unknown) => unknown;
    },
  ) {
    const { quota, open } = options.streams;
    let releaseStream: () => void;
    let releaseConsumer: () => void;
    let first: IteratorResult<unknown>;
    try {
      releaseStream = quota.take(who, 'streams');
      try {
        releaseConsumer = quota.take(who, 'consumers');
      } catch (error) {
        releaseStream();
        throw error;
      }
    } catch (error) {
      await stream.return(undefined);
      return write.first(error);
    }
    try {
      first = await stream.next();
    } catch (error) {
      releaseConsumer();
      releaseStream();
      return write.first(error);
    }
    reply.hijack();
    const sse = new SseStream(reply.raw, corsHeaders(reply));
    let why: { code: string; message: string } | undefined;
    const stop = (reason?: { code: string; message: string }) => {
      why ??= reason;
      stopped.abort();
    };
    reply.raw.on('close', () => stop());
    const letGo = open.hold(stop, who);
    try {
      if (!first.done) await sse.send({ data: write.event(first.value) });
      while (!stopped.signal.aborted && !sse.closed) {
        const next = await stream.next();
        if (next.done) break;
        await sse.send({ data: write.event(next.value) });
      }
    } catch (error) {
      request.log.warn({ err: error, route: request.routeOptions.url }, 'A2A stream ended by an error');
      if (!sse.closed) await sse.send({ event: 'error', data: write.error(error) });
    } finally {
      // Stopped from outside (the gateway closing, the token revoked), not ended by its task.
      const stoppedOutside = stopped.signal.aborted;
      if (why && !sse.closed)
        await sse.send({ event: 'error', data: write.error(new TransportRefusal(401, why.message)) });
      letGo();
      stopped.abort();
      await stream.return(undefined).catch(() => undefined);
      releaseConsumer();
      releaseStream();
      sse.end();
      // Its connection goes too: a closing server waits for every connection, a kept-alive one too.
      if (stoppedOutside) request.raw.socket?.end();
    }
  }

  function sendRpcRefusal(
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

  function sendRestError(request: FastifyRequest, reply: FastifyReply, error: unknown) {
    const mapped = transportError(error) ?? unexpected(request, error);
    if (mapped instanceof TransportRefusal) logRefusal(request, mapped);
    const { status, body } = restErrorBody(mapped);
    return reply.code(status).type(A2A_CONTENT_TYPE).send(body);
  }

  function sendPlainError(request: FastifyRequest, reply: FastifyReply, error: unknown) {
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

  logger.debug('A2A server ready');
};

/** A JSON-RPC request's envelope, checked as JSON-RPC 2.0 says (-32700 not JSON, -32600 not a request). */
function parseRpc(text: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = parseJson(text);
  } catch (error) {
    throw Object.assign(new RequestMalformedError((error as Error).message), {
      rpcCode: A2A_ERROR_CODE.PARSE_ERROR,
    });
  }
  const invalid = (why: string) =>
    Object.assign(new RequestMalformedError(`not a JSON-RPC 2.0 request: ${why}`), {
      rpcCode: A2A_ERROR_CODE.INVALID_REQUEST,
    });
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw invalid('not an object');
  const rpc = value as Record<string, unknown>;
  if (rpc.jsonrpc !== '2.0') throw invalid('jsonrpc is not "2.0"');
  if (typeof rpc.method !== 'string' || rpc.method === '') throw invalid('no method');
  const id = rpc.id;
  if (
    id !== undefined &&
    id !== null &&
    typeof id !== 'string' &&
    !(typeof id === 'number' && Number.isInteger(id))
  ) {
    throw invalid('id is not a string, an integer or null');
  }
  return rpc;
}

/** The SDK's reader of each method's params, which its JSON-RPC transport runs outside our handler. */
const PARAMS_OF: Record<string, { fromJSON(object: unknown): unknown }> = {
  SendMessage: SendMessageRequest,
  SendStreamingMessage: SendMessageRequest,
  GetTask: GetTaskRequest,
  ListTasks: ListTasksRequest,
  CancelTask: CancelTaskRequest,
  SubscribeToTask: SubscribeToTaskRequest,
  CreateTaskPushNotificationConfig: TaskPushNotificationConfig,
  GetTaskPushNotificationConfig: GetTaskPushNotificationConfigRequest,
  ListTaskPushNotificationConfigs: ListTaskPushNotificationConfigsRequest,
  DeleteTaskPushNotificationConfig: DeleteTaskPushNotificationConfigRequest,
};

/** Reads a request's params as the SDK will, first: what it cannot read is InvalidParams, not an internal error. */
function checkParams(rpc: Record<string, unknown>): void {
  const type = PARAMS_OF[rpc.method as string];
  const params = rpc.params;
  if (type && typeof params === 'object' && params !== null && !Array.isArray(params)) decode(type, params);
}

/** JSON as the gateway takes it: parsed without prototype keys, and refused past the depth every message is held to. */
function parseJson(text: string): unknown {
  let value: unknown;
  try {
    value = JSON.parse(text, (key, v: unknown) => (key === '__proto__' ? undefined : v));
  } catch (error) {
    throw new RequestMalformedError(`the body is not JSON: ${(error as Error).message}`);
  }
  if (exceedsDepth(value, MAX_MESSAGE_DEPTH)) {
    throw new RequestMalformedError(
      `the body nests objects and arrays more than ${MAX_MESSAGE_DEPTH} levels deep`,
    );
  }
  return value;
}

function rpcError(id: string | number | null, error: unknown) {
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
function restErrorBody(error: unknown): { status: number; body: unknown } {
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
function refusalIn(answer: unknown): { status: number } | undefined {
  const code = (answer as { error?: { code?: number } }).error?.code;
  if (code === undefined) return undefined;
  const statuses: Record<number, number> = { [-32040]: 401, [-32041]: 403, [-32042]: 429 };
  const status = statuses[code];
  return status === undefined ? undefined : { status };
}

const isStream = (value: unknown): value is AsyncGenerator<unknown> =>
  typeof (value as { [Symbol.asyncIterator]?: unknown })?.[Symbol.asyncIterator] === 'function';

/**
 * The version a request asks for: the `A2A-Version` header, else the query parameter; empty is read as 0.3. Only
 * `Major.Minor` counts: the spec says a patch number must not be considered, so `1.0.1` asks for 1.0.
 */
function versionOf(request: FastifyRequest): string | undefined {
  const header = request.headers['a2a-version'];
  const fromHeader = Array.isArray(header) ? header[0] : header;
  const fromQuery = (request.query as Record<string, unknown> | undefined)?.['A2A-Version'];
  const asked = fromHeader?.trim() || (typeof fromQuery === 'string' ? fromQuery.trim() : '');
  return asked === '' ? undefined : asked.replace(/^(\d+\.\d+)\.\d+$/, '$1');
}
