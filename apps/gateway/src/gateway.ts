import { randomBytes } from 'node:crypto';
import { stat } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import fastifyCors from '@fastify/cors';
import fastifyStatic from '@fastify/static';
import fastifySwagger from '@fastify/swagger';
import fastifyWebsocket from '@fastify/websocket';
import {
  CLIENT_WAIT,
  eventsAfter,
  followAllEvents,
  followTaskEvents,
  OperationError,
  PipelineRegistry,
  type SequencedEvent,
} from '@troupe/client';
import {
  DEFAULT_TASK_LIMITS,
  errorMessage,
  exceedsDepth,
  MAX_MESSAGE_DEPTH,
  STREAMS,
  type TaskLimits,
  type WorkflowRecord,
} from '@troupe/protocol';
import { jetstreamManagerOf, type Logger, type NatsBus } from '@troupe/runtime';
import Fastify, {
  type FastifyPluginAsync,
  type FastifyReply,
  type FastifyRequest,
  LogController,
} from 'fastify';
import {
  hasZodFastifySchemaValidationErrors,
  jsonSchemaTransform,
  jsonSchemaTransformObject,
  serializerCompiler,
  validatorCompiler,
  type ZodTypeProvider,
} from 'fastify-type-provider-zod';
import { z } from 'zod';
import { a2aRoutes } from './a2a/a2aRoutes.ts';
import { PushDelivery, type PushSettings } from './a2a/pushDelivery.ts';
import { GatewayActions, InvalidRequest, viewOf } from './actions.ts';
import { AgUiMapper } from './agui.ts';
import {
  AllEventsQuery,
  ApprovalList,
  ApprovalsQuery,
  CancelBody,
  CancelResult,
  DecisionBody,
  DecisionResult,
  ErrorBody,
  EventsQuery,
  Health,
  OpenSessionBody,
  PipelineList,
  PipelineParams,
  ReadyQuery,
  RequestParams,
  SessionList,
  SessionListQuery,
  SessionMessageBody,
  SessionParams,
  SessionView,
  SubmitBody,
  SubmitQuery,
  TaskList,
  TaskListQuery,
  TaskParams,
  TaskQuery,
  TaskView,
  TokenInfo,
} from './api.ts';
import { AuthRefusal, authorize, mayTouch, type Principal, type TokenStore } from './auth.ts';
import { Connections } from './connections.ts';
import { answerTo } from './errors.ts';
import { DEFAULT_MAX_FILE_BYTES, fileRoutes } from './files/fileRoutes.ts';
import { mcpEndpoint } from './mcp/mcpEndpoint.ts';
import { troupeMcpOptions } from './mcp/mcpOptions.ts';
import { isLoopback, webSocketRefusal } from './origins.ts';
import { type SessionRecord, Sessions } from './sessions.ts';
import { SseStream } from './sse.ts';
import { type StreamCaps, StreamQuota, TooManyStreams } from './streamQuota.ts';
import { TaskIds } from './taskIds.ts';
import { watchTokens } from './tokenWatch.ts';
import { WsSession } from './ws.ts';

export interface GatewayOptions {
  bus: NatsBus;
  logger: Logger;
  /** Who may call; every `/v1` request needs a token of theirs unless `auth` is `none`. */
  tokens: TokenStore;
  /** `none`: no token asked, every request acts as `anonymous` with every scope (local use only). */
  auth?: 'tokens' | 'none';
  host?: string;
  /** 0: any free port. */
  port: number;
  /** Origins allowed to call from a browser (CORS) and to open WebSockets; none by default. `*` allows any. */
  corsOrigins?: readonly string[];
  /**
   * The URL clients reach this gateway at (`https://troupe.example.com`): pages of its origin may open WebSockets,
   * and its host is trusted as this gateway's own name.
   */
  publicUrl?: string;
  /**
   * The secret idempotency keys' task ids are made with (at least 32 bytes): every gateway of a deployment needs the
   * same one, so a key means the same task on each. A random one when absent (ids that hold in this process only).
   */
  idSecret?: Uint8Array | string;
  /** What a task may be at most: the coordinators' limits (the protocol's defaults unless they were changed). */
  taskLimits?: TaskLimits;
  /** Per-token caps on open event streams and the NATS consumers they hold (100 and 300). */
  streamCaps?: Partial<StreamCaps>;
  /**
   * The command-line flags a refusal tells the operator to change, when the gateway was started with others than
   * `troupe gateway`'s (`troupe up --gateway` names them `--gateway-public-url`, `--gateway-max-streams`, …).
   */
  flags?: GatewayFlagNames;
  /** How often the tokens file is read again besides when it signals a change, in ms (1,000). */
  tokensReloadMs?: number;
  /** The longest `?wait=` honoured, in seconds (300). */
  maxWaitSeconds?: number;
  /** Where the built dashboard is (`apps/gateway/dashboard/dist` by default); `false` serves none. */
  dashboardDir?: string | false;
  /** A2A push notifications: where webhooks may go and how they are retried; `false` runs no delivery worker here. */
  a2aPush?: PushSettings | false;
  /**
   * The directory task workspaces are under (`<dir>/<pipeline>/<taskId>`: a `troupe up`'s or worker's
   * `<home>/workspaces`, or a volume they share), served by `GET /v1/tasks/{id}/files`; none served when absent.
   */
  workspaces?: string;
  /** The largest workspace file served, in bytes (16 MiB). */
  maxFileBytes?: number;
}

/** The command-line flags behind the options a refusal may point to. */
export interface GatewayFlagNames {
  publicUrl: string;
  corsOrigin: string;
  maxStreams: string;
  maxConsumers: string;
  maxFileSize: string;
}

export interface Gateway {
  /** `http://host:port`. */
  url: string;
  /** The OpenAPI document of the routes, generated from their schemas (also served at `/openapi.json`). */
  openapi(): unknown;
  /**
   * Stops: ends open event streams (a last `gateway_stopping` message) and WebSockets (`1001`), closes every socket
   * with nothing under way at once and the others as their last request is answered, and cuts what is still open
   * after `graceMs` (10 s by default), so a client never holds a stop up.
   */
  close(options?: { graceMs?: number }): Promise<void>;
  /** The sockets open now, and those with a request under way. */
  connections(): { open: number; busy: number };
}

/** How long requests under way when the gateway stops may take to be answered before their sockets are cut. */
export const CLOSE_GRACE_MS = 10_000;

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal | undefined;
  }
}

const ANONYMOUS: Principal = { name: 'anonymous', scopes: ['admin'] };

/**
 * Starts the gateway: Troupe over HTTP, stateless — every answer comes from NATS (the `TASKS` and `EVENTS` streams,
 * the `workflows` and `approvals` buckets), so any number of gateways can serve behind a load balancer.
 */
export async function startGateway(options: GatewayOptions): Promise<Gateway> {
  const { bus, logger } = options;
  const app = Fastify({
    loggerInstance: logger.child({ component: 'gateway' }),
    // Each refusal and failure is logged by the gateway itself, with why; every request is not.
    logController: new LogController({ disableRequestLogging: true }),
    // Ids of our own, so a log line and an error body can be matched.
    genReqId: () => randomBytes(6).toString('hex'),
    bodyLimit: 1_048_576,
  }).withTypeProvider<ZodTypeProvider>();
  // JSON as Fastify parses it (prototype poisoning refused), and refused past the depth every Troupe message is held
  // to, before anything walks it: deeper JSON would exhaust the stack of the code that does (zod, JSON.stringify).
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) =>
    parseJson(request, body as string, (error, value) => {
      if (error) return done(error, undefined);
      if (exceedsDepth(value, MAX_MESSAGE_DEPTH)) {
        const refusal = `the body nests objects and arrays more than ${MAX_MESSAGE_DEPTH} levels deep`;
        return done(new InvalidRequest(refusal), undefined);
      }
      return done(null, value);
    }),
  );
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  app.decorateRequest('principal', undefined);

  await app.register(fastifyCors, {
    origin: corsOrigin(options.corsOrigins ?? []),
    // The A2A and MCP bindings' own headers too, so browser clients of /a2a and /mcp pass the preflight.
    exposedHeaders: ['location', 'mcp-session-id'],
    allowedHeaders: [
      'authorization',
      'content-type',
      'idempotency-key',
      'last-event-id',
      'a2a-version',
      'a2a-extensions',
      'mcp-session-id',
      'mcp-protocol-version',
      // MCP 2026-07-28 requests name their method and target in headers too (SEP-2243).
      'mcp-method',
      'mcp-name',
    ],
  });
  await app.register(fastifyWebsocket, { options: { maxPayload: 1_048_576 } });
  await app.register(fastifySwagger, {
    openapi: {
      info: {
        title: 'Troupe gateway',
        version: '1',
        description:
          'Tasks, their events (SSE, AG-UI), approvals and questions of a Troupe runtime over NATS.',
      },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
      security: [{ bearer: [] }],
    },
    transform: jsonSchemaTransform,
    // Schemas with an id (`.meta({ id })`) become components, referenced from each route.
    transformObject: jsonSchemaTransformObject,
  });

  app.setErrorHandler((error, request, reply) => {
    if (hasZodFastifySchemaValidationErrors(error)) {
      const issues = error.validation.map((v) => ({
        path: `${error.validationContext ?? 'request'}${v.instancePath.replaceAll('/', '.')}`,
        message: v.message ?? 'invalid',
      }));
      return reply.code(400).send({
        error: {
          code: 'invalid_request',
          message: issues.map((i) => `${i.path}: ${i.message}`).join('; '),
          issues,
        },
      });
    }
    if (error instanceof AuthRefusal || error instanceof TooManyStreams) {
      request.log.warn(
        {
          token: request.principal?.name,
          method: request.method,
          route: routeOf(request),
          reason: error.message,
        },
        `refused ${request.method} ${routeOf(request)}: ${error.message}`,
      );
    }
    const answer = answerTo(error);
    if (answer)
      return reply.code(answer.status).send({ error: { code: answer.code, message: answer.message } });
    request.log.error({ err: error, route: routeOf(request) }, 'request failed');
    return reply
      .code(500)
      .send({ error: { code: 'internal', message: `internal error (request ${request.id})` } });
  });

  app.setNotFoundHandler((request, reply) =>
    reply
      .code(404)
      .send({ error: { code: 'not_found', message: `no route ${request.method} ${routeOf(request)}` } }),
  );

  // Every /v1 route needs a token; which scope each needs is its own to say.
  app.addHook('onRequest', async (request) => {
    try {
      // Without tokens the gateway trusts this machine: a page elsewhere that rebinds a name to 127.0.0.1 does not
      // reach it, since its requests name another host.
      if (options.auth === 'none' && !isLoopback(request.headers.host)) {
        throw new AuthRefusal(
          403,
          `without tokens this gateway serves 127.0.0.1 only, not host ${request.headers.host}`,
        );
      }
      // Browsers apply no CORS to WebSockets: the gateway checks a page's origin itself.
      if (request.headers.upgrade?.toLowerCase() === 'websocket') {
        const refusal = webSocketRefusal(request.headers.origin, request.headers.host, {
          allowed: options.corsOrigins ?? [],
          publicUrl: options.publicUrl,
          ...(options.flags ? { flags: options.flags } : {}),
        });
        if (refusal) throw new AuthRefusal(403, refusal);
      }
      // By the route matched, not the raw URL: `/%761/tasks` is `/v1/tasks` once decoded.
      if (!request.routeOptions.url?.startsWith('/v1/')) return;
      if (options.auth === 'none') {
        request.principal = ANONYMOUS;
        return;
      }
      // Browsers cannot set headers on EventSource or WebSocket: they may send the token as ?access_token=.
      const fromQuery = (request.query as { access_token?: unknown } | undefined)?.access_token;
      request.principal = options.tokens.authenticate(
        request.headers.authorization ?? (typeof fromQuery === 'string' ? `Bearer ${fromQuery}` : undefined),
      );
    } catch (error) {
      if (error instanceof AuthRefusal) {
        request.log.warn(
          { method: request.method, route: routeOf(request), reason: error.message },
          `refused ${request.method} ${routeOf(request)}: ${error.message}`,
        );
      }
      throw error;
    }
  });

  /** Who made the request; a /v1 route reached without the hook's check is refused, never served as anyone. */
  const principal = (request: FastifyRequest): Principal => {
    if (!request.principal) throw new AuthRefusal(401, 'no bearer token: send Authorization: Bearer <token>');
    return request.principal;
  };
  if (options.idSecret === undefined && options.auth !== 'none') {
    logger.warn(
      'the gateway has no id secret: an Idempotency-Key names the same task on this gateway only, until it restarts',
    );
  }
  const actions = new GatewayActions(bus, {
    ...(options.maxWaitSeconds === undefined ? {} : { maxWaitSeconds: options.maxWaitSeconds }),
    ...(options.taskLimits ? { taskLimits: options.taskLimits } : {}),
    taskIds: options.idSecret === undefined ? TaskIds.random() : new TaskIds(options.idSecret),
  });
  const openStreams: OpenStreams = new Map();
  const quota = new StreamQuota(options.streamCaps, {
    ...(options.flags ? { streams: options.flags.maxStreams, consumers: options.flags.maxConsumers } : {}),
  });
  // A token revoked or changed in the tokens file ends the streams it opened, not only its next request.
  const stopWatching = watchTokens(options.tokens, logger, options.tokensReloadMs);
  const stopListening = options.tokens.onChange(() => {
    for (const [stop, who] of [...openStreams]) {
      if (options.auth !== 'none' && !options.tokens.holds(who)) {
        stop({
          code: 'unauthenticated',
          message: `token ${who.name} was revoked or changed; connect again with a valid token`,
        });
      }
    }
  });
  const sessions = new Sessions(bus, actions, logger);
  // MCP over streamable HTTP (docs/interop.md): pipelines as tools, with the same tokens.
  const mcp = troupeMcpOptions(bus, actions, options.idSecret);
  await app.register(mcpEndpoint, {
    mcp,
    tokens: options.tokens,
    auth: options.auth ?? 'tokens',
    logger,
    bodyLimit: taskBodyLimit(options.taskLimits ?? DEFAULT_TASK_LIMITS),
    quota,
  });
  // A2A v1.0 (docs/interop.md): every pipeline an A2A agent, with the same tokens and stream caps.
  await app.register(a2aRoutes, {
    bus,
    actions,
    sessions,
    tokens: options.tokens,
    auth: options.auth ?? 'tokens',
    logger,
    publicUrl: options.publicUrl,
    idSecret: options.idSecret,
    push: options.a2aPush === false ? false : { ...options.a2aPush },
    streams: { quota, open: openStreams },
  });

  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());

  // A task's workspace files (files/fileRoutes.ts), where this host holds them.
  await app.register(fileRoutes, {
    actions,
    principal,
    workspaces: options.workspaces,
    maxFileBytes: options.maxFileBytes ?? DEFAULT_MAX_FILE_BYTES,
    maxFileSizeFlag: options.flags?.maxFileSize ?? '--max-file-size',
  });

  await app.register(dashboard, { dir: options.dashboardDir ?? defaultDashboardDir() });

  app.get('/healthz', { schema: { response: { 200: Health, 503: Health } } }, async (_request, reply) => {
    const health = await checkHealth(bus, false);
    return reply.code(health.ok ? 200 : 503).send(health);
  });

  app.get(
    '/readyz',
    { schema: { querystring: ReadyQuery, response: { 200: Health, 503: Health } } },
    async (request, reply) => {
      const health = await checkHealth(bus, true);
      const wanted = [request.query.pipeline ?? []]
        .flat()
        .flatMap((names) => names.split(','))
        .filter(Boolean);
      const ready = health.ok && wanted.length > 0 ? await checkPipelines(bus, health, wanted) : health;
      return reply.code(ready.ok ? 200 : 503).send(ready);
    },
  );

  app.post(
    '/v1/pipelines/:name/tasks',
    {
      // Room for an input as large as the coordinators store, beside the rest of the task.
      bodyLimit: taskBodyLimit(options.taskLimits ?? DEFAULT_TASK_LIMITS),
      schema: {
        summary: 'Submit a task',
        description:
          'Stores the task for the pipeline. 202 with the task; with `?wait=<seconds>`, 200 with its result if it ' +
          'ends within the wait. An id (in the body, or derived from the `Idempotency-Key` header and the token) ' +
          'already submitted runs nothing again: the answer says `duplicate`.',
        params: PipelineParams,
        querystring: SubmitQuery,
        body: SubmitBody,
        response: {
          200: TaskView,
          202: TaskView,
          400: ErrorBody,
          401: ErrorBody,
          403: ErrorBody,
          404: ErrorBody,
        },
      },
    },
    async (request, reply) => {
      const key = request.headers['idempotency-key'];
      const idempotencyKey = Array.isArray(key) ? key[0] : key;
      const { done, view } = await actions.submit(principal(request), request.params.name, request.body, {
        ...(idempotencyKey ? { idempotencyKey } : {}),
        ...(request.query.wait ? { waitSeconds: request.query.wait } : {}),
      });
      reply.header('location', `/v1/tasks/${view.taskId}`);
      return reply.code(done ? 200 : 202).send(view);
    },
  );

  app.get(
    '/v1/tasks/:id',
    {
      schema: {
        summary: 'A task: where it stands, its usage and cost, its result',
        params: TaskParams,
        querystring: TaskQuery,
        response: { 200: TaskView, 401: ErrorBody, 403: ErrorBody, 404: ErrorBody },
      },
    },
    async (request) => actions.task(principal(request), request.params.id, request.query.steps === true),
  );

  app.get(
    '/v1/tasks/:id/trace',
    {
      schema: {
        summary:
          'A task as a tree: steps, model calls, tool calls, approvals, with totals (as `troupe trace --json`)',
        params: TaskParams,
        response: { 200: z.unknown(), 401: ErrorBody, 403: ErrorBody, 404: ErrorBody },
      },
    },
    async (request) => actions.trace(principal(request), request.params.id),
  );

  app.get(
    '/v1/tasks',
    {
      schema: {
        summary: 'Tasks, newest first',
        querystring: TaskListQuery,
        response: { 200: TaskList, 400: ErrorBody, 401: ErrorBody, 403: ErrorBody },
      },
    },
    async (request) => actions.list(principal(request), request.query),
  );

  app.post(
    '/v1/tasks/:id/cancel',
    {
      schema: {
        summary: 'Cancel a running task',
        params: TaskParams,
        body: CancelBody,
        response: {
          200: CancelResult,
          401: ErrorBody,
          403: ErrorBody,
          404: ErrorBody,
          409: ErrorBody,
          503: ErrorBody,
        },
      },
    },
    async (request) => actions.cancel(principal(request), request.params.id, request.body?.reason),
  );

  app.get(
    '/v1/tasks/:id/events',
    {
      schema: {
        summary: 'The task’s events as Server-Sent Events: history first, then live; resumable',
        description:
          'Each SSE id is the event’s sequence in the EVENTS stream: reconnect with `Last-Event-ID` (or `?after=`) ' +
          'to get what came after it, with nothing lost or repeated. The stream ends after the task’s final event. ' +
          '`?format=ag-ui` sends the same flow as AG-UI events.',
        params: TaskParams,
        querystring: EventsQuery,
        response: {
          204: z.null().describe('the task has ended and nothing came after Last-Event-ID'),
          401: ErrorBody,
          403: ErrorBody,
          404: ErrorBody,
        },
      },
    },
    async (request, reply) => {
      const record = await actions.readable(principal(request), request.params.id);
      const mapper =
        request.query.format === 'ag-ui'
          ? new AgUiMapper(record.metadata?.session ?? record.taskId)
          : undefined;
      // A browser reconnects when a stream ends: after a task's last event, 204 tells it there is nothing more.
      const after = resumeAfter(request);
      if (
        record.status !== 'running' &&
        after !== undefined &&
        (await eventsAfter(bus, record, after)) === 0
      ) {
        return reply.code(204).send(null);
      }
      await streamSse(request, reply, { open: openStreams, quota }, mapper, (from, signal, onEvent) =>
        followTaskEvents(bus, record, {
          ...(from === undefined ? {} : { after: from }),
          signal,
          onEvent,
        }),
      );
    },
  );

  app.get(
    '/v1/events',
    {
      schema: {
        summary:
          'Every task’s events as they are stored (one pipeline’s with `?pipeline=`), as Server-Sent Events',
        description:
          'Live from the moment of connecting; `Last-Event-ID` (or `?after=`) resumes after a stream sequence. Only ' +
          'the events of pipelines the token may read are sent. The stream does not end by itself.',
        querystring: AllEventsQuery,
        response: { 401: ErrorBody, 403: ErrorBody },
      },
    },
    async (request, reply) => {
      const who = principal(request);
      authorize(who, 'read', request.query.pipeline);
      await streamSse(
        request,
        reply,
        { open: openStreams, quota },
        undefined,
        (after, signal, onEvent, stream) =>
          followAllEvents(bus, {
            ...(after === undefined ? {} : { after }),
            pipeline: request.query.pipeline,
            signal,
            onEvent: (sequenced) =>
              mayTouch(who, sequenced.event.pipeline) ? onEvent(sequenced) : undefined,
            // Live from now: the client is told when "now" is, so it knows nothing stored since will be missed.
            onReady: () => stream.send({ event: 'ready', data: { live: true } }),
          }),
      );
    },
  );

  app.get(
    '/v1/token',
    {
      schema: {
        summary: 'The token this request came with: its name, scopes and pipelines',
        response: { 200: TokenInfo, 401: ErrorBody },
      },
    },
    async (request) => {
      const { name, scopes, pipelines } = principal(request);
      return { name, scopes: [...scopes], ...(pipelines ? { pipelines: [...pipelines] } : {}) };
    },
  );

  app.get(
    '/v1/pipelines',
    {
      schema: {
        summary: 'The pipelines coordinators have loaded, with their agents and their flow as a graph',
        response: { 200: PipelineList, 401: ErrorBody, 403: ErrorBody },
      },
    },
    async (request) => {
      const who = principal(request);
      authorize(who, 'read');
      const registry = await PipelineRegistry.open(bus, CLIENT_WAIT).catch((error: unknown) => {
        throw new OperationError(
          'no_coordinator',
          `no Troupe coordinator has run on this server yet (${errorMessage(error)})`,
        );
      });
      return {
        pipelines: (await registry.all())
          .filter((p) => mayTouch(who, p.name))
          .map(({ host: _host, ...pipeline }) => pipeline),
      };
    },
  );

  app.get(
    '/v1/approvals',
    {
      schema: {
        summary: 'Approvals and questions waiting for a person (every one with `?all=true`)',
        querystring: ApprovalsQuery,
        response: { 200: ApprovalList, 401: ErrorBody, 403: ErrorBody },
      },
    },
    async (request) => ({
      requests: await actions.approvals(principal(request), {
        ...(request.query.all ? { all: true } : {}),
        ...(request.query.taskId ? { taskId: request.query.taskId } : {}),
      }),
    }),
  );

  app.post(
    '/v1/approvals/:id',
    {
      schema: {
        summary: 'Decide an approval (allow, or deny with a reason) or answer a question',
        params: RequestParams,
        body: DecisionBody,
        response: {
          200: DecisionResult,
          400: ErrorBody,
          401: ErrorBody,
          403: ErrorBody,
          404: ErrorBody,
          409: ErrorBody,
          503: ErrorBody,
        },
      },
    },
    async (request) => actions.decide(principal(request), request.params.id, request.body),
  );

  app.post(
    '/v1/sessions',
    {
      schema: {
        summary:
          'Open a session: a conversation of goals on one pipeline, each run as a task that sees the earlier ones',
        body: OpenSessionBody,
        response: { 201: SessionView, 400: ErrorBody, 401: ErrorBody, 403: ErrorBody, 409: ErrorBody },
      },
    },
    async (request, reply) => {
      const session = await sessions.open(principal(request), request.body.pipeline, request.body.id);
      reply.header('location', `/v1/sessions/${session.id}`);
      return reply.code(201).send(sessionView(session, []));
    },
  );

  app.get(
    '/v1/sessions',
    {
      schema: {
        summary: 'Sessions, newest first',
        querystring: SessionListQuery,
        response: { 200: SessionList, 401: ErrorBody, 403: ErrorBody },
      },
    },
    async (request) => ({
      sessions: (await sessions.list(principal(request), request.query.pipeline)).map(
        ({ turns: _turns, ...session }) => session,
      ),
    }),
  );

  app.get(
    '/v1/sessions/:id',
    {
      schema: {
        summary: 'A session, with each message’s task as it stands',
        params: SessionParams,
        response: { 200: SessionView, 401: ErrorBody, 403: ErrorBody, 404: ErrorBody },
      },
    },
    async (request) => {
      const { session, tasks } = await sessions.read(principal(request), request.params.id);
      return sessionView(session, tasks);
    },
  );

  app.post(
    '/v1/sessions/:id/messages',
    {
      schema: {
        summary:
          'Send a follow-up goal: runs as a new task that sees the session’s earlier goals and results',
        description:
          'The task gets `input.session` with the earlier turns (the last three whole, older ones condensed) and ' +
          '`metadata.session`. 409 while the last turn’s task still runs. `?wait=` as for submitting a task.',
        params: SessionParams,
        querystring: SubmitQuery,
        body: SessionMessageBody,
        response: {
          200: TaskView,
          202: TaskView,
          400: ErrorBody,
          401: ErrorBody,
          403: ErrorBody,
          404: ErrorBody,
          409: ErrorBody,
        },
      },
    },
    async (request, reply) => {
      const { done, view } = await sessions.say(
        principal(request),
        request.params.id,
        request.body,
        request.query.wait,
      );
      reply.header('location', `/v1/tasks/${view.taskId}`);
      return reply.code(done ? 200 : 202).send(view);
    },
  );

  app.get(
    '/v1/ws',
    {
      websocket: true,
      schema: {
        summary: 'A WebSocket: follow tasks, submit, cancel, approve, deny and answer (see docs/gateway.md)',
      },
      // Refused as HTTP (429) while the upgrade can still be answered.
      preValidation: async (request) => quota.check(principal(request), 'streams'),
    },
    (socket, request) => {
      const who = principal(request);
      let release: () => void;
      try {
        release = quota.take(who, 'streams');
      } catch (error) {
        // Another connection of the token took the last slot since the check.
        socket.close(1013, (error as Error).message.slice(0, 120));
        return;
      }
      const session = new WsSession(socket, who, actions, bus, request.log, quota);
      const stop: StopStream = (why) =>
        why
          ? session.close(1008, `${why.code}: ${why.message}`)
          : session.close(1001, 'the gateway is closing');
      openStreams.set(stop, who);
      socket.on('close', () => {
        openStreams.delete(stop);
        release();
      });
    },
  );

  // Counted from the first connection on, so a stop knows what each socket owes.
  const connections = new Connections(app.server);
  await app.listen({ host: options.host ?? '127.0.0.1', port: options.port });
  // Every gateway takes part in delivering webhooks: a config is worked on by one at a time (docs/interop.md).
  const pushDelivery =
    options.a2aPush === false ? undefined : new PushDelivery({ bus, logger, ...options.a2aPush });
  pushDelivery?.start();
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : options.port;
  const url = `http://${options.host ?? '127.0.0.1'}:${port}`;
  logger.info(
    { url, auth: options.auth ?? 'tokens', tokens: options.tokens.size },
    `gateway listening on ${url}`,
  );
  return {
    url,
    openapi: () => app.swagger(),
    connections: () => connections.count(),
    close: async ({ graceMs = CLOSE_GRACE_MS } = {}) => {
      // Open streams end first: the server closes only once every connection has.
      for (const stop of [...openStreams.keys()]) stop();
      actions.stopWaiting();
      stopWatching();
      stopListening();
      const closed = app.close();
      const cancel = connections.close(graceMs);
      try {
        await pushDelivery?.stop();
        await closed;
      } finally {
        cancel();
      }
    },
  };
}

/** What a log line says of a request: its route, or its path, never its query (which may hold a token). */
function routeOf(request: FastifyRequest): string {
  return request.routeOptions.url ?? request.url.split('?')[0] ?? '';
}

/** The dashboard's built files, beside the gateway's package (wherever the gateway's code was bundled to). */
function defaultDashboardDir(): string {
  return join(
    dirname(createRequire(import.meta.url).resolve('@troupe/gateway/package.json')),
    'dashboard',
    'dist',
  );
}

/**
 * Serves the dashboard at `/`: static files built ahead (no build at run time), under a Content-Security-Policy
 * that lets the page talk to this gateway only. Without a build there, `/` says how to make one.
 */
const dashboard: FastifyPluginAsync<{ dir: string | false }> = async (app, { dir }) => {
  if (dir === false) return;
  const built = await stat(join(dir, 'index.html')).then(
    () => true,
    () => false,
  );
  if (!built) {
    app.get('/', { schema: { hide: true } }, async (_request, reply) =>
      reply
        .code(503)
        .type('text/plain')
        .send(
          `The dashboard is not built (no ${dir}/index.html): run npm run build in the Troupe checkout.\n`,
        ),
    );
    return;
  }
  await app.register(fastifyStatic, {
    root: dir,
    prefix: '/',
    index: 'index.html',
    setHeaders: (res) => {
      res.header(
        'content-security-policy',
        "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self'; frame-ancestors 'none'",
      );
      res.header('x-content-type-options', 'nosniff');
    },
  });
};

/** The largest body a task is sent in: an input as large as may be stored, and a task as large as may be published. */
const taskBodyLimit = (limits: TaskLimits) => limits.maxInputBytes + limits.maxTaskBytes;

/** A session with its turns' tasks as they stand (a task not yet accepted is `submitted`). */
function sessionView(
  session: SessionRecord,
  tasks: readonly (WorkflowRecord | undefined)[],
): z.infer<typeof SessionView> {
  return {
    ...session,
    turns: session.turns.map((turn, i) => {
      const task = tasks[i];
      const view = task ? viewOf(task) : undefined;
      return {
        ...turn,
        status: task?.status ?? 'submitted',
        ...(view?.output === undefined ? {} : { output: view.output }),
        ...(view?.failure ? { failure: view.failure } : {}),
      };
    }),
  };
}

/** The last message of an event stream ended by the gateway's stop. */
const STOPPING = {
  code: 'gateway_stopping',
  message: 'the gateway is stopping; connect again, with Last-Event-ID, to resume where this stream ended',
};

/** Ends a stream: with the reason the client is told (a revoked token), or none when the gateway closes. */
type StopStream = (why?: { code: string; message: string }) => void;

/**
 * Open event streams and WebSockets with the principal each serves: ended when the gateway closes (a client that
 * never goes must not keep it up) or when the principal's token is revoked.
 */
type OpenStreams = Map<StopStream, Principal>;

/** Where a client resumes: the `Last-Event-ID` of its reconnect first (EventSource keeps its URL), else `?after=`. */
function resumeAfter(request: FastifyRequest): number | undefined {
  const header = request.headers['last-event-id'];
  const lastId = Number.parseInt(Array.isArray(header) ? (header[0] ?? '') : (header ?? ''), 10);
  if (Number.isSafeInteger(lastId) && lastId >= 0) return lastId;
  return (request.query as { after?: number }).after;
}

/**
 * Streams events as Server-Sent Events: resuming after the client's `Last-Event-ID` (or `?after=`), each event with
 * its stream sequence as id (in AG-UI form, only the last event of a group carries it, so a resume skips none of
 * the rest), until the source ends, the client goes, or the gateway closes.
 */
async function streamSse(
  request: FastifyRequest,
  reply: FastifyReply,
  streams: { open: OpenStreams; quota: StreamQuota },
  mapper: AgUiMapper | undefined,
  follow: (
    after: number | undefined,
    signal: AbortSignal,
    onEvent: (event: SequencedEvent) => Promise<void>,
    stream: SseStream,
  ) => Promise<void>,
): Promise<void> {
  const after = resumeAfter(request);
  const who = request.principal ?? ANONYMOUS;
  // Slots taken while a refusal can still be an HTTP answer (429); given back however the stream ends.
  const releaseStream = streams.quota.take(who, 'streams');
  let releaseConsumer: () => void;
  try {
    releaseConsumer = streams.quota.take(who, 'consumers');
  } catch (error) {
    releaseStream();
    throw error;
  }
  reply.hijack();
  const stream = new SseStream(reply.raw, corsHeaders(reply));
  const stopped = new AbortController();
  let why: { code: string; message: string } | undefined;
  const stop: StopStream = (reason) => {
    why ??= reason;
    stopped.abort();
  };
  reply.raw.on('close', () => stop());
  streams.open.set(stop, who);
  // The client may have gone while the request was checked: its close came before anyone listened.
  if (request.raw.socket?.destroyed || reply.raw.destroyed) stop();
  try {
    if (!stopped.signal.aborted) {
      await follow(
        after,
        stopped.signal,
        async ({ seq, event }) => {
          if (!mapper) return stream.send({ id: seq, event: event.kind, data: event });
          const mapped = mapper.map(event);
          for (const [i, agui] of mapped.entries()) {
            await stream.send({ ...(i === mapped.length - 1 ? { id: seq } : {}), data: agui });
          }
        },
        stream,
      );
    }
  } catch (error) {
    request.log.warn({ err: error, route: routeOf(request) }, 'event stream ended by an error');
    if (!stream.closed)
      await stream.send({ event: 'error', data: { code: 'unavailable', message: errorMessage(error) } });
  } finally {
    // Stopped with no reason: the gateway is stopping, which the client is told, so it connects again elsewhere.
    if (stopped.signal.aborted && !stream.closed)
      await stream.send({ event: 'error', data: why ?? STOPPING });
    streams.open.delete(stop);
    releaseConsumer();
    releaseStream();
    stream.end();
  }
}

async function checkHealth(bus: NatsBus, ready: boolean): Promise<HealthBody> {
  const connection = bus.connection;
  if (connection.isClosed()) return { ok: false, nats: 'closed', message: 'the NATS connection is closed' };
  const nats = (connection as { isReconnecting?: () => boolean }).isReconnecting?.()
    ? 'reconnecting'
    : 'connected';
  try {
    const jsm = await jetstreamManagerOf(bus);
    await jsm.getAccountInfo();
    if (!ready) return { ok: nats === 'connected', nats, jetstream: 'ok' };
    try {
      await jsm.streams.info(STREAMS.events);
      await jsm.streams.info(STREAMS.tasks);
      return { ok: nats === 'connected', nats, jetstream: 'ok', streams: 'ok' };
    } catch (error) {
      return {
        ok: false,
        nats,
        jetstream: 'ok',
        streams: 'missing',
        message: `no Troupe coordinator has made its streams on this server (${(error as Error).message})`,
      };
    }
  } catch (error) {
    return { ok: false, nats, jetstream: 'unreachable', message: (error as Error).message };
  }
}

/**
 * Ready for these pipelines: a coordinator has served each, so its consumer exists. (A task published before that is
 * kept and runs once one does; this tells a client that it will not wait for a deploy.)
 */
async function checkPipelines(bus: NatsBus, health: HealthBody, wanted: string[]): Promise<HealthBody> {
  try {
    const known = await (await PipelineRegistry.open(bus, CLIENT_WAIT)).names();
    const missing = wanted.filter((name) => !known.includes(name));
    if (missing.length === 0) return { ...health, pipelines: 'ok' };
    return {
      ...health,
      ok: false,
      pipelines: 'missing',
      message: `no coordinator has served ${missing.map((name) => `"${name}"`).join(', ')} yet; served: ${known.join(', ') || 'none'}`,
    };
  } catch (error) {
    return {
      ...health,
      ok: false,
      pipelines: 'missing',
      message: `cannot read the pipeline registry: ${errorMessage(error)}`,
    };
  }
}

type HealthBody = z.infer<typeof Health>;

function corsOrigin(origins: readonly string[]): boolean | string[] {
  if (origins.includes('*')) return true;
  return origins.length === 0 ? false : [...origins];
}

/** The CORS headers @fastify/cors set on the reply, for a response written past Fastify (SSE). */
function corsHeaders(reply: FastifyReply): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(reply.getHeaders())) {
    if (name.startsWith('access-control-') && value !== undefined) headers[name] = String(value);
  }
  return headers;
}
