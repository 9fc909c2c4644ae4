import { ErrorBody, TokenInfo } from '@troupe/protocol';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { principalOf } from '../requestAuth.ts';

/** `GET /v1/token`: the token a request came with, so a client (the dashboard) can tell what it may do. */
export const tokenRoute: FastifyPluginAsyncZod = async (app) => {
  app.get(
    '/v1/token',
    {
      schema: {
        summary: 'The token this request came with: its name, scopes and pipelines',
        response: { 200: TokenInfo, 401: ErrorBody },
      },
    },
    async (request) => {
      const { name, scopes, pipelines } = principalOf(request);
      return { name, scopes: [...scopes], ...(pipelines ? { pipelines: [...pipelines] } : {}) };
    },
  );
};
