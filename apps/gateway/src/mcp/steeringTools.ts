import type { CallToolResult, McpServer, RegisteredTool } from '@modelcontextprotocol/server';
import { OperationError } from '@troupe/client';
import {
  FamilyToolResult,
  ForkToolInput,
  PauseToolInput,
  RestartToolInput,
  ResumeToolInput,
  SteerToolResult,
  TellToolInput,
  TellToolResult,
} from '@troupe/protocol';
import { GatewayError } from '../gatewayError.ts';
import type { LongTaskDeps } from './longTasks.ts';

/*
 * The tools that steer a task as `troupe pause|resume|tell|restart|fork` do, each over the gateway's action of the
 * same name, so an MCP host is refused exactly what the HTTP routes refuse its token. `troupe_tell`, `troupe_pause`
 * and `troupe_resume` need the `approve` scope (a person's part); `troupe_restart` and `troupe_fork` make a new task,
 * and need `submit`.
 */

/** What a refusal means for the model that called, by the error's code: whether and how to try again. */
const REFUSAL_HINT: Record<string, string> = {
  conflict: 'nothing was changed: the task is not in a state this applies to',
  not_found: 'no such task is visible to this token',
  too_large: 'nothing was changed: the arguments are too large',
  forbidden: "this token may not do this to that task's pipeline",
  unavailable: 'nothing was changed now; try again in a few seconds',
  invalid_request: 'nothing was changed: the arguments do not fit the task',
};

/**
 * A refused steering call as a tool error (`isError`), its text the refusal's code, what it means, and the reason,
 * so a model can tell "already paused" from "try again later". Anything else is thrown on.
 */
async function steering<T extends Record<string, unknown>>(
  act: () => Promise<T>,
  describe: (result: T) => string,
): Promise<CallToolResult> {
  try {
    const result = await act();
    return { content: [{ type: 'text', text: describe(result) }], structuredContent: result };
  } catch (error) {
    if (!(OperationError.is(error) || GatewayError.is(error))) throw error;
    const { code, message } = error as { code: string; message: string };
    const hint = REFUSAL_HINT[code];
    return {
      content: [{ type: 'text', text: `refused (${code}${hint ? `: ${hint}` : ''}): ${message}` }],
      isError: true,
    };
  }
}

/**
 * `troupe_tell`: a message for the agent at work in a running task (one `troupe_start` started, say), which reads it
 * before its next model call, as a user turn, as `troupe tell` does. Offered to a token with the `approve` scope, as
 * the gateway's tell route is.
 */
export function registerTellTool(server: McpServer, deps: LongTaskDeps): RegisteredTool {
  const { actions, who } = deps;
  return server.registerTool(
    'troupe_tell',
    {
      title: 'Tell a running Troupe task something',
      description:
        'Tells the agent at work in a running Troupe task something ("use the v2 API, not v1"): it reads it before ' +
        'its next model call, as a user turn; when no agent is at work, the next one does. Answers with the ' +
        "message's id. Refused (isError, nothing told) when the task has ended, is still queued, already holds 100 " +
        'unread messages, or no coordinator runs it right now (try again in a few seconds, with the same idempotencyKey).',
      inputSchema: TellToolInput,
      outputSchema: TellToolResult,
    },
    async ({ taskId, text, idempotencyKey }, ctx) =>
      await steering(
        () =>
          actions.tell(
            who,
            taskId,
            { text, by: steeredBy(deps, ctx) },
            idempotencyKey === undefined ? {} : { idempotencyKey },
          ),
        (told) => `told task ${taskId} (${told.messageId})`,
      ),
  );
}

/** `troupe_pause`: holds a running task until `troupe_resume` (`approve` scope, as the pause route). */
export function registerPauseTool(server: McpServer, deps: LongTaskDeps): RegisteredTool {
  const { actions, who } = deps;
  return server.registerTool(
    'troupe_pause',
    {
      title: 'Pause a running Troupe task',
      description:
        'Pauses a running Troupe task: the agent at work finishes its current model or tool call, then the task is ' +
        'held (no model or tool calls, its held time not counted against its timeouts) until troupe_resume, across ' +
        'restarts too. Nothing is lost. Refused (isError, nothing changed) when the task is already paused, has ' +
        'ended, is still queued, or no coordinator runs it right now (try again in a few seconds).',
      inputSchema: PauseToolInput,
      outputSchema: SteerToolResult,
      annotations: { idempotentHint: false, destructiveHint: false },
    },
    async ({ taskId, reason }, ctx) =>
      await steering(
        () => actions.pause(who, taskId, { ...(reason ? { reason } : {}), by: steeredBy(deps, ctx) }),
        () =>
          `paused task ${taskId}: it is held once its current model or tool call ends; troupe_resume lets it go on`,
      ),
  );
}

/** `troupe_resume`: lets a paused task go on where it was held (`approve` scope, as the resume route). */
export function registerResumeTool(server: McpServer, deps: LongTaskDeps): RegisteredTool {
  const { actions, who } = deps;
  return server.registerTool(
    'troupe_resume',
    {
      title: 'Resume a paused Troupe task',
      description:
        'Lets a paused Troupe task go on where it was held; no step it finished runs again. Refused (isError, nothing ' +
        'changed) when the task is not paused, has ended, or no coordinator runs it right now (try again in a few ' +
        'seconds).',
      inputSchema: ResumeToolInput,
      outputSchema: SteerToolResult,
      annotations: { idempotentHint: false, destructiveHint: false },
    },
    async ({ taskId }, ctx) =>
      await steering(
        () => actions.resume(who, taskId, { by: steeredBy(deps, ctx) }),
        () => `resumed task ${taskId}`,
      ),
  );
}

/** `troupe_restart`: runs an ended task again from a step, as a new task (`submit` scope, as the restart route). */
export function registerRestartTool(server: McpServer, deps: LongTaskDeps): RegisteredTool {
  const { actions, who } = deps;
  return server.registerTool(
    'troupe_restart',
    {
      title: 'Restart a failed Troupe task from a step',
      description:
        'Runs a failed or cancelled Troupe task again from one of its steps, as a new task linked to it (read it ' +
        'with troupe_get): the steps that completed before that step are reused (no model call, tool call or ' +
        'person asked again); the step and all after it run. The original stays as it ended. Refused (isError, ' +
        'no task made) for a task still running or one that completed (fork it), or a step it never started.',
      inputSchema: RestartToolInput,
      outputSchema: FamilyToolResult,
    },
    async ({ taskId, from, newest, idempotencyKey }, ctx) =>
      await steering(
        () =>
          actions.restart(
            who,
            taskId,
            { from, ...(newest ? { newest: true } : {}), by: steeredBy(deps, ctx) },
            idempotencyKey === undefined ? {} : { idempotencyKey },
          ),
        (made) => `restarted task ${taskId} from ${from} as task ${made.taskId}; read it with troupe_get`,
      ),
  );
}

/** `troupe_fork`: a new task from an ended one at a step, with edits (`submit` scope, as the fork route). */
export function registerForkTool(server: McpServer, deps: LongTaskDeps): RegisteredTool {
  const { actions, who } = deps;
  return server.registerTool(
    'troupe_fork',
    {
      title: 'Fork an ended Troupe task at a step',
      description:
        'Starts a new task from an ended Troupe task at one of its steps (read it with troupe_get), with another ' +
        'input and/or earlier steps\u2019 outputs replaced: the steps that completed before that step are reused ' +
        '(with the edits), the step and all after it run. A person\u2019s answer is never set, and after an edit ' +
        'the person is asked again. Refused (isError, no task made) for a task still running, a step it never ' +
        'started, or a set of a step not reused.',
      inputSchema: ForkToolInput,
      outputSchema: FamilyToolResult,
    },
    async ({ taskId, at, input, set, newest, idempotencyKey }, ctx) =>
      await steering(
        () =>
          actions.fork(
            who,
            taskId,
            {
              at,
              ...(input ? { input } : {}),
              ...(set ? { set } : {}),
              ...(newest ? { newest: true } : {}),
              by: steeredBy(deps, ctx),
            },
            idempotencyKey === undefined ? {} : { idempotencyKey },
          ),
        (made) => `forked task ${taskId} at ${at} as task ${made.taskId}; read it with troupe_get`,
      ),
  );
}

/** Who steered, as recorded: the MCP client (the gateway adds the token's name). */
function steeredBy(deps: LongTaskDeps, ctx: Parameters<LongTaskDeps['clientName']>[0]): string {
  return `MCP client ${deps.clientName(ctx)}`.slice(0, 100);
}
