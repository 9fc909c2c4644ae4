import {
  ErrorBody,
  FamilyResult,
  ForkBody,
  PauseBody,
  PauseResult,
  RestartBody,
  ResumeBody,
  ResumeResult,
  TaskParams,
  TellBody,
  TellResult,
} from '@troupe/protocol';
import type { FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { type GatewayServices, taskBodyLimit } from '../gatewayServices.ts';
import { principalOf } from '../requestAuth.ts';

/** Every way a steering request can be refused: unknown, not allowed, ended or in the wrong state, nobody running it. */
const REFUSALS = {
  400: ErrorBody,
  401: ErrorBody,
  403: ErrorBody,
  404: ErrorBody,
  409: ErrorBody,
  503: ErrorBody,
} as const;

/**
 * A person steering a task: pause a running one, resume it, tell its agent something (each needs the `approve` scope
 * for the task's pipeline, as deciding its approvals does, and goes to the coordinator running the task); restart or
 * fork an ended one as a new task (the `submit` scope for its pipeline, as submitting does).
 */
export const steeringRoutes: FastifyPluginAsyncZod<GatewayServices> = async (
  app,
  { actions, taskLimits },
) => {
  app.post(
    '/v1/tasks/:id/pause',
    {
      schema: {
        summary: 'Pause a running task',
        description:
          'The step at work finishes its current model or tool call, then the task is held (no new step, no timer ' +
          'against its deadline) until it is resumed. Recorded before the answer, so it holds across a restart. 409 ' +
          'when the task has ended or is paused already; 503 when no coordinator runs it right now.',
        params: TaskParams,
        body: PauseBody,
        response: { 200: PauseResult, ...REFUSALS },
      },
    },
    async (request) => actions.pause(principalOf(request), request.params.id, request.body ?? {}),
  );

  app.post(
    '/v1/tasks/:id/resume',
    {
      schema: {
        summary: 'Resume a paused task',
        description:
          'The task goes on where it was held: the step it held is sent again under the same id, and what it had ' +
          'done is not done again. 409 when it is not paused, or has ended.',
        params: TaskParams,
        body: ResumeBody,
        response: { 200: ResumeResult, ...REFUSALS },
      },
    },
    async (request) => actions.resume(principalOf(request), request.params.id, request.body ?? {}),
  );

  app.post(
    '/v1/tasks/:id/tell',
    {
      schema: {
        summary: "Tell a running task's agent something",
        description:
          'A message for the agent at work: it reads it before its next model call, as a user turn (the next agent ' +
          'step does when none is at work). Recorded before the answer, so a crash neither loses nor repeats it; the ' +
          "answer's `messageId` is the one the task's `task.told` and `agent.told` events name. An " +
          "`Idempotency-Key` makes a retry tell nothing new: it is answered with the first message's id (the task " +
          'knows its last 100 keys).',
        params: TaskParams,
        body: TellBody,
        response: { 200: TellResult, ...REFUSALS },
      },
    },
    async (request) => actions.tell(principalOf(request), request.params.id, request.body, keyOf(request)),
  );

  app.post(
    '/v1/tasks/:id/restart',
    {
      schema: {
        summary: 'Run a failed or cancelled task again from a step, as a new task',
        description:
          'A new task of the same pipeline, linked to this one by its `origin`: the steps that completed before `from` ' +
          'first started are reused (no model or tool call of theirs runs again); `from` and every step after it ' +
          'runs. The original stays as it ended. 202 with the new task; an `Idempotency-Key` makes a retry no second ' +
          'task. 409 for a task still running or completed (fork that), 400 for a step it never started.',
        params: TaskParams,
        body: RestartBody,
        response: { 202: FamilyResult, ...REFUSALS },
      },
    },
    async (request, reply) => {
      const made = await actions.restart(
        principalOf(request),
        request.params.id,
        request.body,
        keyOf(request),
      );
      return reply.code(202).header('location', `/v1/tasks/${made.taskId}`).send(made);
    },
  );

  app.post(
    '/v1/tasks/:id/fork',
    {
      bodyLimit: taskBodyLimit(taskLimits),
      schema: {
        summary: 'Start a new task from an ended one at a step, with edits',
        description:
          "A new task whose history up to `at` is the original's, with `input` in place of its input and `set` " +
          'replacing the outputs of steps before `at` (by step id); `at` and every step after it runs, seeing the ' +
          'edits. 202 with the new task; 409 for a task still running, 400 for a step it never started or a `set` ' +
          'for a step that is not reused.',
        params: TaskParams,
        body: ForkBody,
        response: { 202: FamilyResult, 413: ErrorBody, ...REFUSALS },
      },
    },
    async (request, reply) => {
      const made = await actions.fork(principalOf(request), request.params.id, request.body, keyOf(request));
      return reply.code(202).header('location', `/v1/tasks/${made.taskId}`).send(made);
    },
  );
};

/** The request's `Idempotency-Key`, as the actions take it. */
function keyOf(request: FastifyRequest): { idempotencyKey?: string } {
  const key = request.headers['idempotency-key'];
  const idempotencyKey = Array.isArray(key) ? key[0] : key;
  return idempotencyKey ? { idempotencyKey } : {};
}
