import { StreamResponse } from '@a2a-js/sdk';
import { A2A_ERROR_CODE, ContentTypeNotSupportedError } from '@a2a-js/sdk/errors';
import {
  type A2ARequestHandler,
  JsonRpcTransportHandler,
  ServerCallContext,
  validateVersion,
} from '@a2a-js/sdk/server';
import type { JetStreamBus, Logger } from '@troupe/runtime';
import { ValueStore } from '@troupe/runtime';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { GatewayActions } from '../actions.ts';
import { authorize, type Principal, type TokenStore } from '../auth.ts';
import type { OpenStreams } from '../openStreams.ts';
import { ANONYMOUS } from '../requestAuth.ts';
import type { Sessions } from '../sessions.ts';
import type { StreamQuota } from '../streamQuota.ts';
import { TaskIds } from '../taskIds.ts';
import {
  A2A_CONTENT_TYPE,
  isStream,
  refusalIn,
  restErrorBody,
  rpcError,
  sendRestError,
  sendRpcRefusal,
} from './a2aErrorAnswers.ts';
import { checkParams, parseJson, parseRpc, versionOf } from './a2aRequest.ts';
import { streamOut } from './a2aStream.ts';
import { AgentCards, agentCardRoutes, HIDDEN } from './agentCardRoutes.ts';
import { guarded, internalError } from './guardedHandler.ts';
import { type A2aServices, PipelineAgent, SIGNAL_KEY } from './pipelineAgent.ts';
import { PushConfigs } from './pushConfigs.ts';
import type { PushUrlPolicy } from './pushUrls.ts';
import { restCall } from './restBinding.ts';
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

  const principal = (request: FastifyRequest): Principal =>
    options.auth === 'none' ? ANONYMOUS : options.tokens.authenticate(request.headers.authorization);
  const cards = new AgentCards(bus, {
    publicUrl: options.publicUrl,
    bearer: options.auth !== 'none',
    push: push !== false,
  });
  await app.register(agentCardRoutes, { cards, principal });

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
    const card = await cards.forEndpoint(request, who, pipeline);
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
    return streamOut(request, reply, options.streams, prepared.who, stopped, answer, {
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
      return await streamOut(request, reply, options.streams, who, stopped, call.run(handler, context), {
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

  logger.debug('A2A server ready');
};
