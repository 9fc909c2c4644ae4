import {
  CancelBody,
  CancelResult,
  ErrorBody,
  PipelineParams,
  SubmitBody,
  SubmitQuery,
  TaskList,
  TaskListQuery,
  TaskParams,
  TaskQuery,
  TaskTrace,
  TaskView,
} from '@troupe/protocol';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { type GatewayServices, taskBodyLimit } from '../gatewayServices.ts';
import { principalOf } from '../requestAuth.ts';

/** Tasks: submit one to a pipeline, read one, its trace, the list of them, cancel one. */
export const taskRoutes: FastifyPluginAsyncZod<GatewayServices> = async (app, { actions, taskLimits }) => {
  app.post(
    '/v1/pipelines/:name/tasks',
    {
      // Room for an input as large as the coordinators store, beside the rest of the task.
      bodyLimit: taskBodyLimit(taskLimits),
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
      const { done, view } = await actions.submit(principalOf(request), request.params.name, request.body, {
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
    async (request) => actions.task(principalOf(request), request.params.id, request.query.steps === true),
  );

  app.get(
    '/v1/tasks/:id/trace',
    {
      schema: {
        summary:
          'A task as a tree: steps, model calls, tool calls, approvals, with totals (as `troupe trace --json`)',
        params: TaskParams,
        response: { 200: TaskTrace, 401: ErrorBody, 403: ErrorBody, 404: ErrorBody },
      },
    },
    async (request) => actions.trace(principalOf(request), request.params.id),
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
    async (request) => actions.list(principalOf(request), request.query),
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
    async (request) => actions.cancel(principalOf(request), request.params.id, request.body?.reason),
  );
};
