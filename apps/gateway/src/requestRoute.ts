import type { FastifyRequest } from 'fastify';

/** What a log line says of a request: its route, or its path, never its query (which may hold a token). */
export function routeOf(request: FastifyRequest): string {
  return request.routeOptions.url ?? request.url.split('?')[0] ?? '';
}
