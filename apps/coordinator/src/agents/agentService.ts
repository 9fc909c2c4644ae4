import { BUCKETS, formatPath, HumanRequest } from '@troupe/protocol';
import {
  type AgentHost,
  type AgentHostOptions,
  type Clock,
  connectMcpServers,
  EventFactory,
  type HostedAgent,
  type JetStreamBus,
  KvMemory,
  KvStore,
  type LocalSteps,
  type Logger,
  type McpConnections,
  NatsHumanGate,
  StepJournal,
  startAgentHost,
  systemClock,
  ThreadedHeartbeatSender,
  ToolRegistry,
  type TroupeMetrics,
  ValueStore,
  type WorkspaceLimits,
  workspaceLimitsFromEnv,
} from '@troupe/runtime';
import { hostedAgents } from '../config/agentDefinitions.ts';
import { builtinTools } from '../config/builtinTools.ts';
import { ConfigError, type ConfigIssue } from '../config/configError.ts';
import { suggestion } from '../config/didYouMean.ts';
import { LoadCache } from '../config/loadCache.ts';
import { type LoadedPipeline, loadStoredVersion } from '../config/loadPipeline.ts';
import { isRemoteAgentConfig, PipelineConfig, sessionSummarizer } from '../config/pipelineSchema.ts';
import { canonicalJson, shortVersion } from '../config/pipelineVersion.ts';
import { PipelineVersions } from '../config/pipelineVersions.ts';

export interface AgentServiceOptions {
  bus: JetStreamBus;
  pipelines: readonly LoadedPipeline[];
  logger: Logger;
  /** Task workspaces live under `<workspaceRoot>/<pipeline>/<taskId>`. */
  workspaceRoot: string;
  /** Only these agents (by name, in every pipeline); all when absent. */
  only?: readonly string[];
  registry?: ToolRegistry;
  clock?: Clock;
  /** Milliseconds a person has when neither the pipeline nor the agent says. */
  approvalTimeoutMs?: number;
  /**
   * The process's `--metrics` counters: told what the steps here wait on people for (`troupe_approvals_pending`).
   * The service (`troupe up`, `troupe worker`) also counts its NATS traffic and connection on them.
   */
  metrics?: TroupeMetrics;
  /** Where outputs and tool results too large for a message go; a store on `bus` with its defaults when absent. */
  values?: ValueStore;
  /** How much of a task's workspace is handed on between steps; `TROUPE_WORKSPACE_MAX_*_MIB` or the defaults when absent. */
  workspaceLimits?: WorkspaceLimits;
  /**
   * The most steps in flight on each host here for `local` to take one more from a workflow of this process (see
   * `LocalSteps`); 0, the default, takes none (a `troupe worker` runs no workflow).
   */
  maxLocalSteps?: number;
  /**
   * How long a step's model call waits before its agent actor is parked (stopped, and restored when the reply comes:
   * `AgentHostOptions.parkAfterMs`); 0 parks none. The host's default (5 s) when absent.
   */
  parkAfterMs?: number;
}

/** The agents of some pipelines, served in this process. */
export interface AgentService {
  /** Agent names served, per pipeline. */
  readonly serving: ReadonlyMap<string, readonly string[]>;
  /**
   * What keeps a new version of a pipeline served here from running its agents: MCP servers changed (they are
   * connected at start), or a tool no server here offers. Empty when it can run.
   */
  check(pipeline: LoadedPipeline): ConfigIssue[];
  /**
   * Serves the agents a stored version of a pipeline has that are not served here yet (added since this process
   * started), each step run as that version defines the agent; among `only` when given. Returns the agents added.
   */
  serveVersion(pipeline: string, hash: string): Promise<string[]>;
  /**
   * Takes a step from a workflow of this process when a host here serves its agent at its version and has room:
   * each of the step's pipeline's hosts is asked in turn, as they are now (a version served since included).
   */
  readonly local: LocalSteps;
  /** Steps of its hosts parked now (`parkAfterMs`): their agent actors let go while their model calls wait. */
  parked(): number;
  stop(): Promise<void>;
}

/**
 * Hosts agents: connects each pipeline's MCP servers, builds its tools, and serves its agents' subjects in queue
 * groups, so this process shares their steps with every other coordinator or worker serving them.
 */
export async function startAgentService(options: AgentServiceOptions): Promise<AgentService> {
  const { bus, logger } = options;
  const clock = options.clock ?? systemClock;
  const base = options.registry ?? builtinTools();
  const human = new NatsHumanGate({
    bus,
    store: await KvStore.open(bus, BUCKETS.approvals, HumanRequest),
    events: new EventFactory(clock),
    clock,
    logger,
    timeoutMs: options.approvalTimeoutMs ?? 600_000,
  });
  const memory = await KvMemory.open(bus);
  const stopCounting = options.metrics?.countPending(() => human.pending);
  const journal = await StepJournal.open(bus);
  const values = options.values ?? new ValueStore(bus);
  const workspaceLimits = options.workspaceLimits ?? workspaceLimitsFromEnv();
  const versions = await PipelineVersions.open(bus);
  // One heartbeat thread for every host here: a busy event loop must not make a live step look dead.
  const heartbeats = new ThreadedHeartbeatSender({ bus, logger });
  await heartbeats.started;
  const warnIfUnpriced = unpricedWarning(options.pipelines, logger);
  const mcp: McpConnections[] = [];
  const hosts: { pipeline: string; host: AgentHost }[] = [];
  const serving = new Map<string, string[]>();
  /** Each pipeline as this process loaded it, its tools (once connected) and its agents of other versions. */
  const loaded = new Map<string, { pipeline: LoadedPipeline; registry?: ToolRegistry } & VersionAgents>();
  const takesLocally = (options.maxLocalSteps ?? 0) > 0;
  const host = (
    pipeline: LoadedPipeline,
    registry: ToolRegistry,
    agents: readonly HostedAgent[],
    olderAgents: readonly string[],
  ): AgentHost =>
    startAgentHost({
      bus,
      pipeline: pipeline.config.name,
      agents,
      registry,
      workspaceRoot: options.workspaceRoot,
      logger,
      clock,
      price: (provider, model, response) => {
        warnIfUnpriced(provider, model);
        return pipeline.prices.cost(provider, model, response.usage);
      },
      human,
      memory,
      journal: journal.forPipeline(pipeline.config.name, values),
      values,
      // Files go between hosts only where the pipeline asks: on one host they are on its disk already.
      ...(pipeline.config.workspace?.handOff ? { workspaceLimits, handOffWorkspace: true } : {}),
      heartbeats,
      ...summarizerOf(pipeline.config),
      version: pipeline.version.hash,
      ...versionAgents(loaded.get(pipeline.config.name), takesLocally),
      olderAgents,
      maxLocalSteps: options.maxLocalSteps ?? 0,
      ...(options.parkAfterMs === undefined ? {} : { parkAfterMs: options.parkAfterMs }),
    });
  try {
    for (const pipeline of options.pipelines) {
      const name = pipeline.config.name;
      // The tools are looked up when a step comes: the registry is made below, or when a new version needs it.
      const hasTool = (tool: string) => (loaded.get(name)?.registry ?? base).has(tool);
      loaded.set(name, { pipeline, ...agentsOfVersions(versions, name, logger, hasTool) });
      const agents = hostedAgents(pipeline, options.only);
      const olderAgents = await agentsOfOlderVersions(versions, pipeline, options.only);
      if (agents.length === 0 && olderAgents.length === 0) continue;
      const registry = await pipelineTools(pipeline, base, mcp, logger);
      const entry = loaded.get(name);
      if (entry) entry.registry = registry;
      serving.set(name, [...agents.map((a) => a.name), ...olderAgents]);
      hosts.push({ pipeline: name, host: host(pipeline, registry, agents, olderAgents) });
    }
  } catch (error) {
    await Promise.all(hosts.map((h) => h.host.stop()));
    await Promise.all(mcp.map((m) => m.close()));
    await heartbeats.close();
    throw error;
  }
  /** Starts a host for the agents of a stored version not served here yet; see {@link AgentService.serveVersion}. */
  const serveNew = async (pipeline: string, hash: string): Promise<string[]> => {
    const entry = loaded.get(pipeline);
    if (!entry || stopped) return [];
    // Its agents loaded before its first task starts, so that task's steps run here with no NATS hop (see `local`).
    if (takesLocally) await entry.load(hash);
    const version = await versions.get(pipeline, hash);
    const parsed = version === undefined ? undefined : PipelineConfig.safeParse(version.config);
    if (!parsed?.success) return [];
    const served = new Set(serving.get(pipeline) ?? []);
    const added = Object.keys(parsed.data.agents)
      .filter((agent) => !served.has(agent) && (options.only === undefined || options.only.includes(agent)))
      .sort();
    if (added.length === 0 || stopped) return [];
    entry.registry ??= await pipelineTools(entry.pipeline, base, mcp, logger);
    // Served as another version's agents are: each step loads the agent its version defines.
    hosts.push({ pipeline, host: host(entry.pipeline, entry.registry, [], added) });
    serving.set(pipeline, [...served, ...added]);
    logger.info(
      { pipeline, version: hash, agents: added },
      `serving agents ${added.join(', ')} of pipeline ${pipeline}, new in version ${shortVersion(hash)}`,
    );
    return added;
  };
  let serial: Promise<unknown> = Promise.resolve();
  let stopped = false;
  const local: LocalSteps = {
    tryTake(request, hooks) {
      if (stopped) return undefined;
      for (const served of hosts) {
        if (served.pipeline !== request.pipeline) continue;
        const call = served.host.local.tryTake(request, hooks);
        if (call) return call;
      }
      // A version this process did not load (another coordinator introduced it): loaded now, for its next steps.
      const entry = loaded.get(request.pipeline);
      if (entry && request.version !== undefined && request.version !== entry.pipeline.version.hash)
        void entry.load(request.version);
      return undefined;
    },
  };
  return {
    serving,
    local,
    check(next) {
      const entry = loaded.get(next.config.name);
      if (!entry) return [];
      return versionToolIssues(entry.pipeline, entry.registry ?? base, next);
    },
    serveVersion(pipeline, hash) {
      // One at a time: two calls for one version must not both start a host for its new agents.
      const adding = serial.then(() => serveNew(pipeline, hash));
      serial = adding.catch(() => undefined);
      return adding;
    },
    parked: () => hosts.reduce((sum, h) => sum + h.host.parked, 0),
    async stop() {
      stopped = true;
      await serial;
      // Approvals and questions cut short by the stop stay pending: the process that resumes the step waits on them.
      human.detach();
      stopCounting?.();
      await Promise.all(hosts.map((h) => h.host.stop()));
      await Promise.all(mcp.map((m) => m.close()));
      await heartbeats.close();
    },
  };
}

/**
 * The agents that only other stored versions of the pipeline have (renamed or removed in this file), among `only`
 * when given: this host serves them for those versions' tasks. Read once, at start.
 */
async function agentsOfOlderVersions(
  versions: PipelineVersions,
  pipeline: LoadedPipeline,
  only: readonly string[] | undefined,
): Promise<string[]> {
  const name = pipeline.config.name;
  const own = new Set(Object.keys(pipeline.config.agents));
  const older = new Set<string>();
  for (const hash of await versions.hashes(name)) {
    if (hash === pipeline.version.hash) continue;
    const version = await versions.get(name, hash);
    // A stored version that does not parse has no agents to serve; its steps fail version_unavailable, saying why.
    const parsed = version === undefined ? undefined : PipelineConfig.safeParse(version.config);
    const agents = parsed?.success ? parsed.data.agents : {};
    for (const agent of Object.keys(agents)) {
      if (!own.has(agent) && (only === undefined || only.includes(agent))) older.add(agent);
    }
  }
  return [...older].sort();
}

/** What a host is given to run other versions' agents: only what it takes locally needs their loaded agents. */
function versionAgents(
  agents: VersionAgents | undefined,
  takesLocally: boolean,
): Pick<AgentHostOptions, 'agentOf' | 'loadedAgentOf'> {
  if (!agents) return { agentOf: async () => undefined };
  return { agentOf: agents.agentOf, ...(takesLocally ? { loadedAgentOf: agents.loadedAgentOf } : {}) };
}

/** The agents of a pipeline's stored versions, each version loaded once. */
interface VersionAgents {
  /** An agent as a version defines it; a string saying why that version cannot run here. */
  agentOf: (hash: string, agent: string) => Promise<HostedAgent | string | undefined>;
  /** An agent of a version loaded already, found at once (for a step taken in this process). */
  loadedAgentOf: (hash: string, agent: string) => HostedAgent | undefined;
  /**
   * Loads a version's agents ahead of its steps; never fails (a version that cannot load is logged, its steps go
   * over NATS). A version tried once is not tried again here: its steps load it, as over NATS.
   */
  load: (hash: string) => Promise<void>;
}

/**
 * Each agent as a stored version of the pipeline defines it, its models built from the version (scripts included)
 * and keys from this host's environment; loaded once per version.
 */
function agentsOfVersions(
  versions: PipelineVersions,
  pipeline: string,
  logger: Logger,
  hasTool: (name: string) => boolean,
): VersionAgents {
  const load = async (hash: string): Promise<Map<string, HostedAgent> | string | undefined> => {
    const version = await versions.get(pipeline, hash);
    if (version === undefined) return undefined;
    const label = `pipeline ${pipeline} version ${shortVersion(hash)}`;
    try {
      const pipelineVersion = await loadStoredVersion(version, label, { logger });
      const lacking = lackingTools(pipelineVersion, hasTool);
      if (lacking) {
        logger.error({ pipeline, version: hash }, `${label} cannot run here: ${lacking}`);
        return `${label} cannot run here: ${lacking}`;
      }
      logger.info({ pipeline, version: hash }, `loaded ${label} to run its tasks' steps`);
      return new Map(hostedAgents(pipelineVersion).map((agent) => [agent.name, agent]));
    } catch (error) {
      // Not something a retry mends (an API key this host lacks, say): the step fails saying so.
      if (!(error instanceof ConfigError)) throw error;
      logger.error({ pipeline, version: hash }, error.message);
      return `${label} cannot run here: ${error.message}`;
    }
  };
  // Only a version that loaded is kept: one missing or failing now is looked for again next time.
  const loaded = new LoadCache(load, (agents) => agents instanceof Map);
  const ready = new Map<string, Map<string, HostedAgent>>();
  const tried = new Set<string>();
  const agentsOf = async (hash: string) => {
    const agents = await loaded.get(hash);
    if (agents instanceof Map) ready.set(hash, agents);
    return agents;
  };
  return {
    agentOf: async (hash, agent) => {
      const agents = await agentsOf(hash);
      return agents instanceof Map ? agents.get(agent) : agents;
    },
    loadedAgentOf: (hash, agent) => ready.get(hash)?.get(agent),
    load: async (hash) => {
      if (tried.has(hash)) return;
      tried.add(hash);
      await agentsOf(hash).catch((error: unknown) =>
        logger.warn(
          { err: error, pipeline, version: hash },
          `cannot load version ${shortVersion(hash)} of pipeline ${pipeline} ahead of its steps; they go over NATS until one loads it`,
        ),
      );
    },
  };
}

/**
 * The tools a version's agents declare that this host lacks, said so a person knows what to do: a version started
 * elsewhere may name tool modules this host's pipeline file does not.
 */
function lackingTools(pipeline: LoadedPipeline, hasTool: (name: string) => boolean): string | undefined {
  const lacking = Object.entries(pipeline.config.agents).flatMap(([agent, config]) =>
    isRemoteAgentConfig(config) ? [] : config.tools.filter((t) => !hasTool(t)).map((t) => `${agent}: ${t}`),
  );
  if (lacking.length === 0) return undefined;
  return (
    `its agents declare tools this host does not have (${lacking.join(', ')}); start this host with a pipeline ` +
    'file whose tools.modules provide them'
  );
}

/**
 * What keeps `next`, a new version of `running`, from running on this host's tools: its MCP servers are connected
 * when the host starts, so a change to them needs a restart, and every tool its agents declare must be here.
 */
function versionToolIssues(
  running: LoadedPipeline,
  registry: ToolRegistry,
  next: LoadedPipeline,
): ConfigIssue[] {
  if (canonicalJson(running.config.mcpServers) !== canonicalJson(next.config.mcpServers)) {
    return [
      {
        path: 'mcpServers',
        message:
          'the MCP servers changed; they are connected when the process starts, so restart it to use them',
      },
    ];
  }
  const issues: ConfigIssue[] = [];
  for (const [agent, config] of Object.entries(next.config.agents)) {
    for (const [i, tool] of config.tools.entries()) {
      if (registry.has(tool)) continue;
      issues.push({
        path: formatPath(['agents', agent, 'tools', i]),
        message: `no tool "${tool}" is loaded in this process; restart it to load the tools this version names`,
      });
    }
  }
  return issues;
}

/** Cost counts as 0 for a model the price table lacks; say so once rather than report a wrong total quietly. */
function unpricedWarning(pipelines: readonly LoadedPipeline[], logger: Logger) {
  const warned = new Set<string>();
  return (provider: string, model: string): void => {
    const key = `${provider}:${model}`;
    if (provider === 'scripted' || warned.has(key)) return;
    if (pipelines.some((p) => p.prices.priceOf(provider, model))) return;
    warned.add(key);
    logger.warn(
      { provider, model },
      `no price is known for ${key}; its cost counts as 0 (add it under prices:)`,
    );
  };
}

/**
 * A pipeline's tools: the built-ins, the tools of its modules (`tools.modules`, loaded with the file) and the tools
 * of its MCP servers (connected now). Every MCP tool an agent declares must exist on its server; a missing one is a
 * config error naming the agent and what the server offers.
 */
export async function pipelineTools(
  pipeline: LoadedPipeline,
  builtins: ToolRegistry,
  connections: McpConnections[],
  logger: Logger,
): Promise<ToolRegistry> {
  const servers = pipeline.config.mcpServers;
  if (Object.keys(servers).length === 0 && pipeline.tools.length === 0) return builtins;
  const registry = new ToolRegistry();
  for (const name of builtins.names()) {
    const tool = builtins.get(name);
    if (tool) registry.register(tool);
  }
  for (const tool of pipeline.tools) registry.register(tool);
  if (Object.keys(servers).length === 0) return registry;
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

const summarizerOf = (config: LoadedPipeline['config']): { sessionSummarizer?: string } => {
  const agent = sessionSummarizer(config);
  return agent === undefined ? {} : { sessionSummarizer: agent };
};
