import type { WorkflowRecord } from '@troupe/protocol';
import {
  ErrorBody,
  OpenSessionBody,
  SessionList,
  SessionListQuery,
  SessionMessageBody,
  SessionParams,
  type SessionRecord,
  SessionView,
  SubmitQuery,
  TaskView,
} from '@troupe/protocol';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { GatewayServices } from '../gatewayServices.ts';
import { principalOf } from '../requestAuth.ts';
import { viewOf } from '../taskView.ts';

/** Sessions: conversations of goals on one pipeline. Open one, list them, read one, send it a follow-up goal. */
export const sessionRoutes: FastifyPluginAsyncZod<GatewayServices> = async (app, { sessions }) => {
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
      const session = await sessions.open(principalOf(request), request.body.pipeline, request.body.id);
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
      sessions: (await sessions.list(principalOf(request), request.query.pipeline)).map(
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
      const { session, tasks } = await sessions.read(principalOf(request), request.params.id);
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
        principalOf(request),
        request.params.id,
        request.body,
        request.query.wait,
      );
      reply.header('location', `/v1/tasks/${view.taskId}`);
      return reply.code(done ? 200 : 202).send(view);
    },
  );
};

/** A session with its turns' tasks as they stand (a task not yet accepted is `submitted`). */
function sessionView(session: SessionRecord, tasks: readonly (WorkflowRecord | undefined)[]): SessionView {
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
