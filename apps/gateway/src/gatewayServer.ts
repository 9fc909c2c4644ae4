import { randomBytes } from 'node:crypto';
import fastifyCors from '@fastify/cors';
import fastifySwagger from '@fastify/swagger';
import fastifyWebsocket from '@fastify/websocket';
import { exceedsDepth, MAX_MESSAGE_DEPTH } from '@troupe/protocol';
import type { Logger } from '@troupe/runtime';
import Fastify, { LogController } from 'fastify';
import {
  hasZodFastifySchemaValidationErrors,
  jsonSchemaTransform,
  jsonSchemaTransformObject,
  serializerCompiler,
  validatorCompiler,
  type ZodTypeProvider,
} from 'fastify-type-provider-zod';
import { InvalidRequest } from './actions.ts';
import { AuthRefusal } from './auth.ts';
import { answerTo } from './errors.ts';
import { routeOf } from './requestRoute.ts';
import { TooManyStreams } from './streamQuota.ts';

/** The largest request body besides a task's (whose routes allow room for its input). */
const BODY_LIMIT = 1_048_576;

const newFastify = (logger: Logger) =>
  Fastify({
    loggerInstance: logger.child({ component: 'gateway' }),
    // Each refusal and failure is logged by the gateway itself, with why; every request is not.
    logController: new LogController({ disableRequestLogging: true }),
    // Ids of our own, so a log line and an error body can be matched.
    genReqId: () => randomBytes(6).toString('hex'),
    bodyLimit: BODY_LIMIT,
  }).withTypeProvider<ZodTypeProvider>();

/** The gateway's Fastify instance: our logger, zod schemas as the routes' types. */
export type GatewayServer = ReturnType<typeof newFastify>;

/**
 * The gateway's HTTP server before any route: zod-checked JSON no deeper than a Troupe message, CORS for the origins
 * allowed, WebSockets, the OpenAPI document, and every error and unknown route answered as `{ error: { code, message } }`.
 */
export async function createGatewayServer(
  logger: Logger,
  corsOrigins: readonly string[],
): Promise<GatewayServer> {
  const app = newFastify(logger);
  parseJsonWithinDepth(app);
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  await app.register(fastifyCors, {
    origin: corsOrigin(corsOrigins),
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
  await app.register(fastifyWebsocket, { options: { maxPayload: BODY_LIMIT } });
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
  answerErrors(app);
  return app;
}

/**
 * JSON as Fastify parses it (prototype poisoning refused), and refused past the depth every Troupe message is held
 * to, before anything walks it: deeper JSON would exhaust the stack of the code that does (zod, JSON.stringify).
 */
function parseJsonWithinDepth(app: GatewayServer): void {
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
}

/** Answers a refusal with its code and a request that fails with `internal` and the request's id, logged. */
function answerErrors(app: GatewayServer): void {
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
}

function corsOrigin(origins: readonly string[]): boolean | string[] {
  if (origins.includes('*')) return true;
  return origins.length === 0 ? false : [...origins];
}
