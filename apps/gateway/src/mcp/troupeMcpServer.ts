import {
  CLIENT_CAPABILITIES_META_KEY,
  CLIENT_INFO_META_KEY,
  type ClientCapabilities,
  type Implementation,
  type McpRequestContext,
  McpServer,
  type RequestStateCodec,
  type ServerContext,
} from '@modelcontextprotocol/server';
import type { McpRoundState, PipelineRegistration } from '@troupe/protocol';
import type { JetStreamBus } from '@troupe/runtime';
import type { GatewayActions } from '../actions.ts';
import type { Principal } from '../auth.ts';
import type { StreamQuota } from '../streamQuota.ts';
import { holdsScope } from './holdsScope.ts';
import { registerCancelTool, registerGetTool } from './longTasks.ts';
import type { PipelineCallContext } from './pipelineCall.ts';
import { PipelineTools } from './pipelineTools.ts';
import {
  registerForkTool,
  registerPauseTool,
  registerRestartTool,
  registerResumeTool,
  registerTellTool,
} from './steeringTools.ts';
import { registerTaskResources } from './taskResources.ts';

/** What every MCP server instance is built over, the same for HTTP (`/mcp`) and stdio (`troupe mcp`). */
export interface TroupeMcpOptions {
  bus: JetStreamBus;
  actions: GatewayActions;
  /** The pipelines coordinators have registered (read per instance, so a new one shows without a restart). */
  pipelines(): Promise<PipelineRegistration[]>;
  codec: RequestStateCodec<McpRoundState>;
  version: string;
  /** Where a problem that ends no request is told (a pipeline registry that cannot be read). */
  warn?(message: string): void;
  /** Per-token caps on the NATS consumers calls hold while they follow a task (the gateway's); none on stdio. */
  quota?: StreamQuota;
  /** Aborted when the server is closing: calls it ends then leave their tasks running. */
  closing?: AbortSignal;
  /** How often a 2025 session's pipeline tools are brought up to date, in ms (5,000). */
  refreshMs?: number;
}

/**
 * Human approvals and questions may take as long as they last (days); the 2025 shim's elicitation round waits that
 * long (a timer's longest, ~24 days), and a task may ask many times.
 */
const INPUT_ROUNDS = { maxRounds: 1_000, roundTimeoutMs: 2_000_000_000 };

/** How much of a client's `clientInfo.name` is recorded (as who decided, why a task was cancelled). */
const CLIENT_NAME_MAX = 100;

/**
 * An MCP server over Troupe for one principal: each pipeline it may submit to is a tool, beside `troupe_start` and
 * `troupe_get`, and each task it may read offers its trace and output as resources. Built per HTTP request (a
 * 2026-07-28 request, or a 2025 session) and per stdio connection, by the SDK's serving entries.
 */
export async function troupeMcpServer(
  options: TroupeMcpOptions,
  who: Principal,
  context: Pick<McpRequestContext, 'era'>,
): Promise<McpServer> {
  const server = new McpServer(
    { name: 'troupe', version: options.version },
    {
      capabilities: { tools: {}, resources: {} },
      instructions:
        'Each tool but troupe_start, troupe_get and troupe_cancel runs a Troupe pipeline as one task and answers ' +
        'with its output. ' +
        'Approvals and questions of the task are asked through elicitation when the client supports it.',
      inputRequired: INPUT_ROUNDS,
      requestState: { verify: options.codec.verify },
    },
  );
  // A 2026-07-28 request says who sent it and what it can do in its own `_meta`; a 2025 session said so once.
  const envelope = (ctx: ServerContext) => ctx.mcpReq.envelope as Record<string, unknown> | undefined;
  const clientName = (ctx: ServerContext): string => {
    const name =
      (envelope(ctx)?.[CLIENT_INFO_META_KEY] as Implementation | undefined)?.name ??
      server.server.getClientVersion()?.name ??
      'an MCP client';
    // The client chooses it, at any length; it goes into a decision's `by` (200 characters at most, with the
    // token's name) and a cancel's reason, which a longer one would make the coordinator refuse.
    return name.length > CLIENT_NAME_MAX ? `${name.slice(0, CLIENT_NAME_MAX)}…` : name;
  };
  const canElicit = (ctx: ServerContext): boolean => {
    const caps =
      context.era === 'modern'
        ? (envelope(ctx)?.[CLIENT_CAPABILITIES_META_KEY] as ClientCapabilities | undefined)
        : server.server.getClientCapabilities();
    // An empty `elicitation: {}` declares form mode (the 2025-06-18 form of the capability).
    return (
      caps?.elicitation !== undefined &&
      (caps.elicitation.form !== undefined || caps.elicitation.url === undefined)
    );
  };
  const call: PipelineCallContext = {
    bus: options.bus,
    actions: options.actions,
    codec: options.codec,
    who,
    era: context.era,
    ...(options.closing ? { closing: options.closing } : {}),
    ...(options.quota ? { quota: options.quota } : {}),
    clientName,
    canElicit,
  };

  const longTasks = {
    bus: options.bus,
    actions: options.actions,
    who,
    clientName,
    ...(options.quota ? { quota: options.quota } : {}),
  };
  if (holdsScope(who, 'read')) {
    registerGetTool(server, longTasks);
    registerTaskResources(server, options.actions, who);
  }
  if (holdsScope(who, 'approve')) {
    registerTellTool(server, longTasks);
    registerPauseTool(server, longTasks);
    registerResumeTool(server, longTasks);
  }
  if (!holdsScope(who, 'submit')) return server;
  registerCancelTool(server, longTasks);
  registerRestartTool(server, longTasks);
  registerForkTool(server, longTasks);
  const tools = new PipelineTools(server, call, longTasks, (message) => options.warn?.(message));
  const sync = async () => {
    try {
      tools.sync(await options.pipelines());
    } catch (error) {
      // No coordinator yet, or NATS away: no pipeline tools for now; a later look may find them.
      options.warn?.(`cannot read the pipelines: ${(error as Error).message}`);
    }
  };
  await sync();
  // A 2026-07-28 instance serves one request; a 2025 one a whole connection, which sees pipelines loaded since.
  if (context.era === 'legacy') {
    const timer = setInterval(() => void sync(), options.refreshMs ?? 5_000);
    timer.unref();
    const closed = server.server.onclose;
    server.server.onclose = () => {
      clearInterval(timer);
      closed?.();
    };
  }
  return server;
}
