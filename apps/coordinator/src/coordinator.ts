import { hostname } from 'node:os';
import { BUCKETS, formatPath, HumanRequest } from '@troupe/protocol';
import {
  type AgentHost,
  type BusSubscription,
  type Clock,
  connectMcpServers,
  EventFactory,
  ensureTroupeStreams,
  type IdGenerator,
  KvStore,
  type Logger,
  type McpConnections,
  type NatsBus,
  NatsHumanGate,
  randomId,
  startAgentHost,
  systemClock,
  ToolRegistry,
} from '@troupe/runtime';
import { agentDefinitions } from './config/agentDefinitions.ts';
import { builtinTools } from './config/builtinTools.ts';
import { ConfigError, type ConfigIssue } from './config/configError.ts';
import { suggestion } from './config/didYouMean.ts';
import type { LoadedPipeline } from './config/loadPipeline.ts';
import { startIntakeGuard } from './intake/intakeGuard.ts';
import { PipelineRegistry } from './intake/pipelineRegistry.ts';
import { type PipelineRunner, startPipelineRunner } from './workflow/pipelineRunner.ts';
import { WorkflowRecord } from './workflow/workflowRecord.ts';

export interface CoordinatorOptions {
  bus: NatsBus;
  pipelines: readonly LoadedPipeline[];
  logger: Logger;
  /** Task workspaces live under `<workspaceRoot>/<pipeline>/<taskId>`. */
  workspaceRoot: string;
  /** Host the pipelines' agents in this process too (default true); false leaves them to workers. */
  hostAgents?: boolean;
  /** The most tasks per pipeline this process runs at once (default 16). */
  concurrency?: number;
  /** How long a task may go unacknowledged before redelivery (default 30 s; kept alive while it runs). */
  ackWaitMs?: number;
  /** How long a step waits for a worker to serve its agent (default 30 s). */
  noResponderWaitMs?: number;
  registry?: ToolRegistry;
  clock?: Clock;
  ids?: IdGenerator;
}

/** A running coordinator. */
export interface Coordinator {
  readonly pipelines: readonly string[];
  /** Task ids this process is running now. */
  running(): string[];
  /** Stops taking tasks; running ones are handed back to NATS to be resumed by a coordinator. */
  stop(): Promise<void>;
}

/**
 * Starts the service for a set of loaded pipelines: sets up the streams and buckets, registers the pipelines,
 * consumes their tasks (one workflow actor per task), and hosts their agents unless told not to.
 *
 * @example
 * const pipeline = await loadPipeline('examples/demo.yaml', { toolNames: builtinTools().names() });
 * const coordinator = await startCoordinator({ bus, pipelines: [pipeline], logger, workspaceRoot: '.troupe/work' });
 */
export async function startCoordinator(options: CoordinatorOptions): Promise<Coordinator> {
  const { bus, logger } = options;
  const clock = options.clock ?? systemClock;
  const ids = options.ids ?? randomId;
  const registry = options.registry ?? builtinTools();
  await ensureTroupeStreams(bus);
  const store = await KvStore.open(bus, BUCKETS.workflows, WorkflowRecord);
  const pipelineRegistry = await PipelineRegistry.open(bus);

  const human = new NatsHumanGate({
    bus,
    store: await KvStore.open(bus, BUCKETS.approvals, HumanRequest),
    events: new EventFactory(clock, ids),
    clock,
    logger,
    timeoutMs: 600_000,
  });
  const unpriced = new Set<string>();
  // Cost counts as 0 for a model the price table lacks; say so once rather than report a wrong total quietly.
  const warnIfUnpriced = (provider: string, model: string) => {
    const key = `${provider}:${model}`;
    if (provider === 'scripted' || unpriced.has(key)) return;
    if (options.pipelines.some((p) => p.prices.priceOf(provider, model))) return;
    unpriced.add(key);
    logger.warn(
      { provider, model },
      `no price is known for ${key}; its cost counts as 0 (add it under prices:)`,
    );
  };
  const mcp: McpConnections[] = [];
  const registries = new Map<string, ToolRegistry>();
  if (options.hostAgents ?? true) {
    try {
      for (const pipeline of options.pipelines) {
        registries.set(pipeline.config.name, await pipelineTools(pipeline, registry, mcp, logger));
      }
    } catch (error) {
      await Promise.all(mcp.map((m) => m.close()));
      throw error;
    }
  }
  const agentHosts: AgentHost[] = [];
  if (options.hostAgents ?? true) {
    for (const pipeline of options.pipelines) {
      agentHosts.push(
        startAgentHost({
          bus,
          pipeline: pipeline.config.name,
          agents: agentDefinitions(pipeline),
          registry: registries.get(pipeline.config.name) ?? registry,
          workspaceRoot: options.workspaceRoot,
          logger,
          clock,
          ids,
          price: (provider, model, response) => {
            warnIfUnpriced(provider, model);
            return pipeline.prices.cost(provider, model, response.usage);
          },
          human,
        }),
      );
    }
  }
  const runners: PipelineRunner[] = [];
  for (const pipeline of options.pipelines) {
    runners.push(
      await startPipelineRunner({
        bus,
        config: pipeline.config,
        store,
        logger: logger.child({ pipeline: pipeline.config.name }),
        clock,
        ids,
        concurrency: options.concurrency ?? 16,
        ...(options.ackWaitMs === undefined ? {} : { ackWaitMs: options.ackWaitMs }),
        ...(options.noResponderWaitMs === undefined ? {} : { noResponderWaitMs: options.noResponderWaitMs }),
      }),
    );
  }

  // Registered once their consumers exist, so a task the registry lets through is never lost.
  const host = `${hostname()}:${process.pid}`;
  for (const pipeline of options.pipelines) {
    await pipelineRegistry.register(pipeline.config, host, new Date(clock.now()));
  }
  const guard: BusSubscription = startIntakeGuard(bus, () => pipelineRegistry.names());

  return {
    pipelines: options.pipelines.map((p) => p.config.name),
    running: () => runners.flatMap((r) => r.running()),
    async stop() {
      guard.unsubscribe();
      await Promise.all(runners.map((r) => r.stop()));
      await Promise.all(agentHosts.map((h) => h.stop()));
      await Promise.all(mcp.map((m) => m.close()));
      await bus.flush();
    },
  };
}

/**
 * A pipeline's tools: the built-ins plus the tools of its MCP servers (connected now). Every MCP tool an agent
 * declares must exist on its server; a missing one is a config error naming the agent and what the server offers.
 */
async function pipelineTools(
  pipeline: LoadedPipeline,
  builtins: ToolRegistry,
  connections: McpConnections[],
  logger: Logger,
): Promise<ToolRegistry> {
  const servers = pipeline.config.mcpServers;
  if (Object.keys(servers).length === 0) return builtins;
  const registry = new ToolRegistry();
  for (const name of builtins.names()) {
    const tool = builtins.get(name);
    if (tool) registry.register(tool);
  }
  const connected = await connectMcpServers(servers, { logger });
  connections.push(connected);
  for (const tool of connected.tools) registry.register(tool);
  const issues: ConfigIssue[] = [];
  for (const [agent, config] of Object.entries(pipeline.config.agents)) {
    for (const [i, tool] of config.tools.entries()) {
      if (registry.has(tool)) continue;
      const server = tool.slice(0, tool.indexOf('.'));
      const offered = connected.servers.find((s) => s.name === server)?.tools ?? [];
      issues.push({
        path: formatPath(['agents', agent, 'tools', i]),
        message: `MCP server ${server} offers no tool "${tool}"${suggestion(tool, offered)}; it offers: ${offered.join(', ') || 'nothing'}`,
      });
    }
  }
  if (issues.length > 0) throw new ConfigError(pipeline.file, issues);
  return registry;
}
