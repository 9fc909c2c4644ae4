import { DEFAULT_TASK_LIMITS } from '@troupe/protocol';
import { a2aRoutes } from './a2a/a2aRoutes.ts';
import { PushDelivery } from './a2a/pushDelivery.ts';
import { GatewayActions } from './actions.ts';
import { Connections } from './connections.ts';
import { DEFAULT_MAX_FILE_BYTES, fileRoutes } from './files/fileRoutes.ts';
import type { GatewayOptions } from './gatewayOptions.ts';
import { createGatewayServer, type GatewayServer } from './gatewayServer.ts';
import { type GatewayServices, taskBodyLimit } from './gatewayServices.ts';
import { mcpEndpoint } from './mcp/mcpEndpoint.ts';
import { troupeMcpOptions } from './mcp/mcpOptions.ts';
import { OpenStreams } from './openStreams.ts';
import { authenticateRequests, principalOf } from './requestAuth.ts';
import { approvalRoutes } from './routes/approvalRoutes.ts';
import { dashboardRoute, defaultDashboardDir } from './routes/dashboardRoute.ts';
import { evalRoutes } from './routes/evalRoutes.ts';
import { eventRoutes } from './routes/eventRoutes.ts';
import { healthRoutes } from './routes/healthRoutes.ts';
import { pipelineRoutes } from './routes/pipelineRoutes.ts';
import { sessionRoutes } from './routes/sessionRoutes.ts';
import { steeringRoutes } from './routes/steeringRoutes.ts';
import { taskRoutes } from './routes/taskRoutes.ts';
import { tokenRoute } from './routes/tokenRoute.ts';
import { webSocketRoute } from './routes/webSocketRoute.ts';
import { Sessions } from './sessions.ts';
import { StreamQuota } from './streamQuota.ts';
import { TaskIds } from './taskIds.ts';
import { watchTokens } from './tokenWatch.ts';

export type { GatewayFlagNames, GatewayOptions } from './gatewayOptions.ts';

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

/**
 * Starts the gateway: Troupe over HTTP, stateless — every answer comes from NATS (the `TASKS` and `EVENTS` streams,
 * the `workflows` and `approvals` buckets), so any number of gateways can serve behind a load balancer.
 */
export async function startGateway(options: GatewayOptions): Promise<Gateway> {
  const { bus, logger, tokens } = options;
  const auth = options.auth ?? 'tokens';
  const taskLimits = options.taskLimits ?? DEFAULT_TASK_LIMITS;
  const app = await createGatewayServer(logger, options.corsOrigins ?? []);
  authenticateRequests(app, {
    tokens,
    auth,
    corsOrigins: options.corsOrigins ?? [],
    publicUrl: options.publicUrl,
    flags: options.flags,
  });

  const services = gatewayServices(options, taskLimits);
  // A token revoked or changed in the tokens file ends the streams it opened, not only its next request.
  const stopWatching = watchTokens(tokens, logger, options.tokensReloadMs);
  const stopListening = tokens.onChange(() => {
    if (auth !== 'none') services.streams.endRevoked(tokens);
  });

  await registerRoutes(app, services, options);

  // Counted from the first connection on, so a stop knows what each socket owes.
  const connections = new Connections(app.server);
  const host = options.host ?? '127.0.0.1';
  await app.listen({ host, port: options.port });
  // Every gateway takes part in delivering webhooks: a config is worked on by one at a time (docs/interop.md).
  const pushDelivery =
    options.a2aPush === false ? undefined : new PushDelivery({ bus, logger, ...options.a2aPush });
  pushDelivery?.start();
  const address = app.server.address();
  const url = `http://${host}:${typeof address === 'object' && address ? address.port : options.port}`;
  logger.info({ url, auth, tokens: tokens.size }, `gateway listening on ${url}`);

  return {
    url,
    openapi: () => app.swagger(),
    connections: () => connections.count(),
    close: async ({ graceMs = CLOSE_GRACE_MS } = {}) => {
      // Open streams end first: the server closes only once every connection has.
      services.streams.stopAll();
      services.actions.stopWaiting();
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

/** Every route family, each a Fastify plugin of its own; the protocol adapters (MCP, A2A) share the same services. */
async function registerRoutes(
  app: GatewayServer,
  services: GatewayServices,
  options: GatewayOptions,
): Promise<void> {
  const { bus, logger, tokens } = options;
  const auth = options.auth ?? 'tokens';
  await app.register(healthRoutes, services);
  await app.register(taskRoutes, services);
  await app.register(steeringRoutes, services);
  await app.register(eventRoutes, services);
  await app.register(approvalRoutes, services);
  await app.register(sessionRoutes, services);
  await app.register(pipelineRoutes, services);
  await app.register(evalRoutes, services);
  await app.register(tokenRoute);
  await app.register(webSocketRoute, services);
  // A task's workspace files, where this host holds them.
  await app.register(fileRoutes, {
    actions: services.actions,
    principal: principalOf,
    workspaces: options.workspaces,
    maxFileBytes: options.maxFileBytes ?? DEFAULT_MAX_FILE_BYTES,
    maxFileSizeFlag: options.flags?.maxFileSize ?? '--max-file-size',
  });
  // MCP over streamable HTTP (docs/interop.md): pipelines as tools, with the same tokens.
  await app.register(mcpEndpoint, {
    mcp: troupeMcpOptions(bus, services.actions, options.idSecret),
    tokens,
    auth,
    logger,
    bodyLimit: taskBodyLimit(services.taskLimits),
    quota: services.quota,
  });
  // A2A v1.0 (docs/interop.md): every pipeline an A2A agent, with the same tokens and stream caps.
  await app.register(a2aRoutes, {
    bus,
    actions: services.actions,
    sessions: services.sessions,
    tokens,
    auth,
    logger,
    publicUrl: options.publicUrl,
    idSecret: options.idSecret,
    push: options.a2aPush === false ? false : { ...options.a2aPush },
    streams: { quota: services.quota, open: services.streams },
  });
  await app.register(dashboardRoute, { dir: options.dashboardDir ?? defaultDashboardDir() });
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
}

/** What the route families share: built once, from the options. */
function gatewayServices(
  options: GatewayOptions,
  taskLimits: GatewayServices['taskLimits'],
): GatewayServices {
  const { bus, logger } = options;
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
  return {
    bus,
    logger,
    actions,
    sessions: new Sessions(bus, actions, logger),
    streams: new OpenStreams(),
    quota: new StreamQuota(options.streamCaps, {
      ...(options.flags ? { streams: options.flags.maxStreams, consumers: options.flags.maxConsumers } : {}),
    }),
    taskLimits,
  };
}
