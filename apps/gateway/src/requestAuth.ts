import type { FastifyRequest } from 'fastify';
import { AuthRefusal, type Principal, type TokenStore } from './auth.ts';
import type { GatewayFlagNames } from './gatewayOptions.ts';
import type { GatewayServer } from './gatewayServer.ts';
import { isLoopback, webSocketRefusal } from './origins.ts';
import { routeOf } from './requestRoute.ts';

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal | undefined;
  }
}

/** Who every request acts as on a gateway without tokens (local use only). */
export const ANONYMOUS: Principal = { name: 'anonymous', scopes: ['admin'] };

export interface RequestAuthOptions {
  tokens: TokenStore;
  auth: 'tokens' | 'none';
  corsOrigins: readonly string[];
  publicUrl: string | undefined;
  flags: GatewayFlagNames | undefined;
}

/**
 * Checks every request before it is routed: the host of a gateway without tokens, a WebSocket's origin, and the
 * bearer token of every `/v1` route (which scope each needs is the route's own to say). Refusals are logged, with why.
 */
export function authenticateRequests(app: GatewayServer, options: RequestAuthOptions): void {
  app.decorateRequest('principal', undefined);
  app.addHook('onRequest', async (request) => {
    try {
      checkOrigin(request, options);
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
}

/** Refuses a request from where this gateway does not serve: another host without tokens, a foreign page's socket. */
function checkOrigin(request: FastifyRequest, options: RequestAuthOptions): void {
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
      allowed: options.corsOrigins,
      publicUrl: options.publicUrl,
      ...(options.flags ? { flags: options.flags } : {}),
    });
    if (refusal) throw new AuthRefusal(403, refusal);
  }
}

/** Who made the request; a /v1 route reached without the hook's check is refused, never served as anyone. */
export function principalOf(request: FastifyRequest): Principal {
  if (!request.principal) throw new AuthRefusal(401, 'no bearer token: send Authorization: Bearer <token>');
  return request.principal;
}
