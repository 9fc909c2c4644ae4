import type { IncomingMessage, ServerResponse } from 'node:http';
import { toNodeHandler } from '@modelcontextprotocol/node';
import { type AuthInfo, createMcpHandler, isInitializeRequest } from '@modelcontextprotocol/server';
import type { Logger } from '@troupe/runtime';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { AuthRefusal, type Principal, type TokenStore } from '../auth.ts';
import { ANONYMOUS } from '../requestAuth.ts';
import type { StreamQuota } from '../streamQuota.ts';
import { type LegacySessionLimits, LegacySessions } from './legacySessions.ts';
import { withoutRepeats } from './repeatedWarnings.ts';
import { type TroupeMcpOptions, troupeMcpServer } from './troupeMcpServer.ts';

export interface McpEndpointOptions {
  mcp: TroupeMcpOptions;
  tokens: TokenStore;
  /** `none`: every request acts as `anonymous` with every scope (the gateway serves 127.0.0.1 only then). */
  auth: 'tokens' | 'none';
  logger: Logger;
  /** The largest request body, in bytes: room for a task's input as large as the coordinators store (1 MiB). */
  bodyLimit?: number;
  /** The gateway's per-token caps on NATS consumers, which MCP calls share with its event streams. */
  quota?: StreamQuota;
  /** How many 2025-11-25 sessions a token may hold, and how long one may sit idle. */
  sessions?: LegacySessionLimits;
}

/**
 * `/mcp`: Troupe as an MCP server over streamable HTTP, with the gateway's bearer tokens (a token sees and calls
 * the pipelines its scope allows). A 2026-07-28 request is served statelessly by a server built for it, as every
 * gateway route is. A 2025-11-25 client gets a session of its own (`Mcp-Session-Id`), held by this gateway, since
 * only a session can carry the server's elicitation requests and the client's cancellations in that revision: route
 * such clients to one gateway (sticky sessions) when several serve.
 */
export const mcpEndpoint: FastifyPluginAsync<McpEndpointOptions> = async (app, options) => {
  const { tokens, logger } = options;
  const closing = new AbortController();
  const mcp = {
    ...options.mcp,
    closing: closing.signal,
    ...(options.quota ? { quota: options.quota } : {}),
    warn: withoutRepeats((message) => logger.warn(`mcp: ${message}`)),
  };
  const build = (who: Principal, era: 'legacy' | 'modern') => troupeMcpServer(mcp, who, { era });
  const modern = createMcpHandler(({ authInfo, era }) => build(principalOf(authInfo), era), {
    legacy: 'reject',
    onerror: (error) => logger.warn({ err: error }, `mcp: ${error.message}`),
  });
  const serveModern = toNodeHandler(modern);
  const sessions = new LegacySessions(options.sessions);
  /** The 2026-07-28 requests under way (a call streaming its progress), with whom each serves. */
  const requests = new Map<ServerResponse, Principal>();
  // A token revoked or changed ends its sessions and its requests under way, not only its next request.
  const stopListening = tokens.onChange(() => {
    if (options.auth === 'none') return;
    sessions.closeWhere((who) => !tokens.holds(who));
    for (const [response, who] of requests) if (!tokens.holds(who)) response.destroy();
  });
  app.addHook('preClose', async () => {
    // The calls the gateway ends by stopping are not cancelled by their clients: their tasks go on.
    closing.abort();
    stopListening();
    sessions.closeAll();
    await modern.close();
  });

  const authenticate = (request: FastifyRequest, reply: FastifyReply): Principal | undefined => {
    if (options.auth === 'none') return ANONYMOUS;
    try {
      return tokens.authenticate(request.headers.authorization);
    } catch (error) {
      if (!(error instanceof AuthRefusal)) throw error;
      logger.warn(
        { route: '/mcp', reason: error.message },
        `refused ${request.method} /mcp: ${error.message}`,
      );
      void reply
        .code(error.status)
        .header('www-authenticate', 'Bearer')
        .send({ error: { code: error.code, message: error.message } });
      return undefined;
    }
  };

  app.all(
    '/mcp',
    { schema: { hide: true }, bodyLimit: options.bodyLimit ?? 1_048_576 },
    async (request, reply) => {
      const who = authenticate(request, reply);
      if (!who) return reply;
      const raw = Object.assign(request.raw, { auth: authInfoOf(who) }) as IncomingMessage & {
        auth: AuthInfo;
        method: string;
        url: string;
      };
      const header = request.headers['mcp-session-id'];
      const sessionId = Array.isArray(header) ? header[0] : header;
      if (sessionId !== undefined) {
        const transport = sessions.find(sessionId, who);
        // Another token's session is answered as one that does not exist.
        if (!transport) {
          return reply.code(404).send({
            jsonrpc: '2.0',
            id: null,
            error: {
              code: -32001,
              message: `no MCP session ${sessionId} on this gateway: initialize a new one`,
            },
          });
        }
        reply.hijack();
        sessions.track(sessionId, reply.raw);
        return transport.handleRequest(raw, reply.raw, request.body);
      }
      if (request.method === 'POST' && isInitializeRequest(request.body)) {
        if (!sessions.makeRoom(who)) {
          return reply.code(429).send({
            jsonrpc: '2.0',
            id: null,
            error: {
              code: -32000,
              message: `token ${who.name} holds ${sessions.perToken} MCP sessions on this gateway, each with a request open: end one first (or use the 2026-07-28 revision, which needs no session)`,
            },
          });
        }
        const transport = await sessions.open(who, await build(who, 'legacy'));
        reply.hijack();
        await transport.handleRequest(raw, reply.raw, request.body);
        // An initialize the transport refused (no `Accept: text/event-stream`, say) opened no session that a later
        // request could reach or the sweep close: its server (and its refresh timer) would be left behind.
        if (transport.sessionId === undefined) await transport.close();
        return;
      }
      reply.hijack();
      requests.set(reply.raw, who);
      reply.raw.once('close', () => requests.delete(reply.raw));
      return serveModern(raw, reply.raw, request.body);
    },
  );
};

/** What the SDK hands each server about the caller: the principal rides in `extra`, never the token itself. */
function authInfoOf(who: Principal): AuthInfo {
  return {
    token: who.tokenSha256 ?? 'none',
    clientId: who.name,
    scopes: [...who.scopes],
    extra: { principal: who },
  };
}

function principalOf(authInfo: AuthInfo | undefined): Principal {
  const who = authInfo?.extra?.principal as Principal | undefined;
  if (!who) throw new AuthRefusal(401, 'no bearer token: send Authorization: Bearer <token>');
  return who;
}
