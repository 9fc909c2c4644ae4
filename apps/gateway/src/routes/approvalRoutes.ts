import {
  ApprovalList,
  ApprovalsQuery,
  DecisionBody,
  DecisionResult,
  ErrorBody,
  RequestParams,
} from '@troupe/protocol';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { GatewayServices } from '../gatewayServices.ts';
import { principalOf } from '../requestAuth.ts';

/** Approvals and questions waiting for a person: list them, decide or answer one. */
export const approvalRoutes: FastifyPluginAsyncZod<GatewayServices> = async (app, { actions }) => {
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
      requests: await actions.approvals(principalOf(request), {
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
    async (request) => actions.decide(principalOf(request), request.params.id, request.body),
  );
};
