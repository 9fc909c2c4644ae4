import type { CallToolResult, McpServer, RegisteredTool, ServerContext } from '@modelcontextprotocol/server';
import { followTaskEvents } from '@troupe/client';
import {
  CancelToolInput,
  GetToolInput,
  MAX_GET_WAIT_SECONDS,
  McpTaskState,
  startToolInput,
  type TaskView,
} from '@troupe/protocol';
import type { JetStreamBus } from '@troupe/runtime';
import type { GatewayActions } from '../actions.ts';
import type { Principal } from '../auth.ts';
import type { StreamQuota } from '../streamQuota.ts';
import { howToSettle } from './humanAsk.ts';
import { taskUri } from './taskResult.ts';

/*
 * A pair of tools for tasks longer than a client waits on one call (MCP 2026-07-28 moved long calls to the Tasks
 * extension, which the SDK's server does not implement): `troupe_start` submits a task of any pipeline the caller
 * may submit to and answers at once with its id; `troupe_get` says where it stands, its output once it has ended,
 * and what it waits on, waiting up to `waitSeconds` for it to end. One pair for every pipeline (not one per
 * pipeline), so a host's tool list grows by two, not twice.
 */

export { MAX_GET_WAIT_SECONDS };

/** Who the long-task tools act for, and over what. */
export interface LongTaskDeps {
  bus: JetStreamBus;
  actions: GatewayActions;
  who: Principal;
  clientName(ctx: ServerContext): string;
  /** The gateway's per-token caps: a `troupe_get` that waits holds one of the token's NATS consumers. */
  quota?: StreamQuota;
}

/**
 * `troupe_start`: submits a task of one of `pipelines` (those the caller may submit to) and answers at once with its
 * id and state. None when there are no such pipelines.
 */
export function registerStartTool(
  server: McpServer,
  deps: LongTaskDeps,
  pipelines: readonly string[],
): RegisteredTool | undefined {
  const { actions, who } = deps;
  const [first, ...rest] = pipelines;
  if (first === undefined) return undefined;
  return server.registerTool(
    'troupe_start',
    {
      title: 'Start a Troupe task',
      description:
        'Starts a task of a Troupe pipeline and answers at once with its id; read it with troupe_get. For tasks ' +
        'longer than a call may wait. The pipeline tools of the same name describe each pipeline and its input.',
      inputSchema: startToolInput([first, ...rest]),
      outputSchema: McpTaskState,
    },
    async ({ pipeline, goal, input }, ctx) => {
      const { view } = await actions.submit(who, pipeline, {
        goal,
        ...(input ? { input } : {}),
        metadata: { via: 'mcp', 'mcp.client': deps.clientName(ctx).slice(0, 200) },
      });
      return resultOf(await stateOf(actions, who, view));
    },
  );
}

/** `troupe_get`: where a task stands, waiting up to `waitSeconds` for it to end. */
export function registerGetTool(server: McpServer, deps: LongTaskDeps): RegisteredTool {
  const { actions, who } = deps;
  return server.registerTool(
    'troupe_get',
    {
      title: 'Read a Troupe task',
      description:
        'Where a Troupe task stands: its status, its output once completed, why it failed, and the approvals or ' +
        `questions it waits on (with how to settle them). waitSeconds (at most ${MAX_GET_WAIT_SECONDS}) waits that long for it to end.`,
      inputSchema: GetToolInput,
      outputSchema: McpTaskState,
      annotations: { readOnlyHint: true },
    },
    async ({ taskId, waitSeconds }, ctx) => {
      const record = await actions.readable(who, taskId);
      if (record.status === 'running' && waitSeconds) {
        const release = deps.quota?.take(who, 'consumers');
        try {
          await untilEnded(deps.bus, record, waitSeconds, ctx.mcpReq.signal);
        } finally {
          release?.();
        }
      }
      return resultOf(await stateOf(actions, who, await actions.task(who, taskId)));
    },
  );
}

/**
 * `troupe_cancel`: stops a running task (one `troupe_start` started, say), with the reason recorded. Deciding its
 * approvals is left to people (the host's user, `troupe approve`, the dashboard): no tool lets the model that called
 * the pipeline approve what the pipeline's policy asks a person about.
 */
export function registerCancelTool(server: McpServer, deps: LongTaskDeps): RegisteredTool {
  const { actions, who } = deps;
  return server.registerTool(
    'troupe_cancel',
    {
      title: 'Cancel a Troupe task',
      description:
        'Cancels a running Troupe task (its model call in flight is aborted); says how it stands after.',
      inputSchema: CancelToolInput,
      outputSchema: McpTaskState,
      annotations: { destructiveHint: true, idempotentHint: true },
    },
    async ({ taskId, reason }, ctx) => {
      await actions.cancel(who, taskId, reason ?? `cancelled through the MCP client ${deps.clientName(ctx)}`);
      return resultOf(await stateOf(actions, who, await actions.task(who, taskId)));
    },
  );
}

async function stateOf(actions: GatewayActions, who: Principal, view: TaskView): Promise<McpTaskState> {
  const running = view.status === 'running' || view.status === 'submitted';
  const waiting = running ? await actions.approvals(who, { taskId: view.taskId }) : [];
  return {
    taskId: view.taskId,
    pipeline: view.pipeline,
    status: view.status,
    ...(view.output === undefined ? {} : { output: view.output }),
    ...(view.failure ? { failure: view.failure } : {}),
    ...(view.paused ? { paused: view.paused } : {}),
    waitingFor: waiting.map((r) => ({ id: r.id, kind: r.kind, prompt: r.prompt, how: howToSettle(r) })),
    trace: taskUri(view.taskId, 'trace'),
  };
}

function resultOf(state: McpTaskState): CallToolResult {
  const lines = [`task ${state.taskId} (${state.pipeline}): ${state.status}`];
  if (state.output !== undefined)
    lines.push(typeof state.output === 'string' ? state.output : JSON.stringify(state.output));
  if (state.failure) lines.push(`${state.failure.reason}: ${state.failure.message}`);
  if (state.paused)
    lines.push(
      `paused since ${state.paused.since}${state.paused.reason ? `: ${state.paused.reason}` : ''} (troupe_resume lets it go on)`,
    );
  for (const w of state.waitingFor) lines.push(w.how);
  return { content: [{ type: 'text', text: lines.join('\n') }], structuredContent: state };
}

/** Waits until the task's final event, `seconds` at most, or until the call is cancelled. */
async function untilEnded(
  bus: JetStreamBus,
  task: { taskId: string; pipeline: string },
  seconds: number,
  cancelled: AbortSignal,
): Promise<void> {
  const stop = AbortSignal.any([cancelled, AbortSignal.timeout(seconds * 1_000)]);
  await followTaskEvents(bus, task, { signal: stop, onEvent: () => undefined });
}
