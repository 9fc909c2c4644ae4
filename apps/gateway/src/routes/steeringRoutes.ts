import {
  ErrorBody,
  PauseBody,
  PauseResult,
  ResumeBody,
  ResumeResult,
  TaskParams,
  TellBody,
  TellResult,
} from '@troupe/protocol';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { GatewayServices } from '../gatewayServices.ts';
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
 * A person steering a running task: pause it, resume it, tell its agent something. Each needs the `approve` scope for
 * the task's pipeline (as deciding its approvals does), and goes to the coordinator running the task.
 */
export const steeringRoutes: FastifyPluginAsyncZod<GatewayServices> = async (app, { actions }) => {
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
          "answer's `messageId` is the one the task's `task.told` and `agent.told` events name.",
        params: TaskParams,
        body: TellBody,
        response: { 200: TellResult, ...REFUSALS },
      },
    },
    async (request) => actions.tell(principalOf(request), request.params.id, request.body),
  );
};
