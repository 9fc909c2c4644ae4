import { CLIENT_WAIT, OperationError, PipelineRegistry } from '@troupe/client';
import { ErrorBody, errorMessage, PipelineList } from '@troupe/protocol';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { authorize, mayTouch } from '../auth.ts';
import type { GatewayServices } from '../gatewayServices.ts';
import { principalOf } from '../requestAuth.ts';

/** `GET /v1/pipelines`: the pipelines coordinators have loaded that the token may read. */
export const pipelineRoutes: FastifyPluginAsyncZod<GatewayServices> = async (app, { bus }) => {
  app.get(
    '/v1/pipelines',
    {
      schema: {
        summary: 'The pipelines coordinators have loaded, with their agents and their flow as a graph',
        response: { 200: PipelineList, 401: ErrorBody, 403: ErrorBody },
      },
    },
    async (request) => {
      const who = principalOf(request);
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
};
