import { resolve } from 'node:path';
import {
  connectBus,
  DEFAULT_OUTAGE_MS,
  type EmbeddedNats,
  ensureOrAwaitTroupeStreams,
  type JetStreamBus,
  type Logger,
  type NatsAccess,
  registerSecretsFromEnv,
  startNatsServer,
  withTimeout,
} from '@troupe/runtime';
import { startAgentService } from './agents/agentService.ts';
import { serveNewestAgents } from './agents/newestAgents.ts';
import { builtinTools } from './config/builtinTools.ts';
import { ConfigError } from './config/configError.ts';
import { suggestion } from './config/didYouMean.ts';
import { type LoadedPipeline, loadPipeline } from './config/loadPipeline.ts';
import type { ImportModule } from './config/toolModules.ts';
import { type Coordinator, type CoordinatorOptions, startCoordinator } from './coordinator.ts';
import { type PipelineWatchOptions, watchPipelines } from './pipelineWatch.ts';
import { claimHome, removeServerRecord, writeServerRecord } from './serverRecord.ts';
import { DEFAULT_STOP_TIMEOUT_MS, STOP_OUTAGE_WAIT_MS, stopWithin } from './stopWithin.ts';

/**
 * What every Troupe process that loads pipelines takes (`troupe up`, `troupe worker`), declared once for both;
 * `replicas` and `metrics` are documented where they are declared ({@link CoordinatorOptions}, and the agent service's
 * options).
 */
export interface HostOptions extends Pick<CoordinatorOptions, 'replicas' | 'metrics'> {
  /** Pipeline files to load. */
  files: readonly string[];
  /** How to log in to the NATS server joined, and talk TLS to it. */
  natsAccess?: NatsAccess;
  /**
   * Where workspaces live (`<home>/workspaces`, default `.troupe`) and, for a `troupe up` that starts its own
   * nats-server, where that server keeps its data and its URL is recorded.
   */
  home?: string;
  /** Let pipelines start local MCP server commands (stdio). */
  allowMcpCommands?: boolean;
  /** Send a task's events in batches (`BusOptions.eventBatch`); unset, yes unless the environment's `TROUPE_EVENT_BATCH=0`. */
  eventBatch?: boolean;
  /** Ends a start-up still waiting for NATS (a stop signal): it then fails with `aborted` or `closed`. */
  signal?: AbortSignal;
  /** Loads the pipelines' tool modules (`tools.modules`); Node's `import()`, JavaScript only, when absent. */
  importModule?: ImportModule;
  logger: Logger;
}

/** The coordinator's own settings, which `troupe up` passes on as given: each is documented on {@link CoordinatorOptions}. */
type CoordinatorSettings = Pick<
  CoordinatorOptions,
  | 'hostAgents'
  | 'maxLocalSteps'
  | 'concurrency'
  | 'maxInFlight'
  | 'ackWaitMs'
  | 'maxDeliver'
  | 'limits'
  | 'stepHeartbeatMs'
  | 'passivateAfterMs'
  | 'checkpointLingerMs'
  | 'eventRetention'
>;

export interface ServiceOptions extends HostOptions, CoordinatorSettings {
  /** Join this NATS server or cluster; without it an embedded nats-server is started. */
  natsUrl?: string;
  /** Reload a pipeline when its file changes (`troupe up --watch`); see {@link watchPipelines}. */
  watch?: boolean | Pick<PipelineWatchOptions, 'debounceMs' | 'onOutcome'>;
}

/** Everything `troupe up` runs: the NATS connection (and embedded server), the coordinator, and how to stop them. */
export interface Service {
  url: string;
  embedded: EmbeddedNats | undefined;
  pipelines: readonly LoadedPipeline[];
  coordinator: Coordinator;
  bus: JetStreamBus;
  /**
   * Hands the running tasks back to NATS, drains the connection and stops the embedded server, all within
   * `timeoutMs` (default {@link DEFAULT_STOP_TIMEOUT_MS}) whatever NATS is doing: what cannot be handed back in
   * that time (NATS unreachable) is left to redelivery after the ack wait. Never rejects.
   */
  stop(timeoutMs?: number): Promise<void>;
}

/**
 * Loads the pipelines (refusing bad files before anything starts), starts or joins NATS, and starts the
 * coordinator. The embedded server's URL is recorded under `home` for `troupe submit` and `troupe tail`.
 */
export async function startService(options: ServiceOptions): Promise<Service> {
  // Keys and tokens in the environment are never logged or published, whatever quotes them.
  registerSecretsFromEnv();
  const home = resolve(options.home ?? '.troupe');
  const registry = builtinTools();
  // Without agents here, nothing calls a model, so their API keys need not be set.
  const requireKeys = options.hostAgents ?? true;
  const load = (file: string) =>
    loadPipeline(file, {
      toolNames: registry.names(),
      requireKeys,
      allowMcpCommands: options.allowMcpCommands ?? process.env.TROUPE_ALLOW_MCP_COMMANDS === '1',
      ...(options.importModule ? { importModule: options.importModule } : {}),
      logger: options.logger,
    });
  const pipelines = await Promise.all(options.files.map(load));
  // One embedded server per home: a second `troupe up` there fails here, before it starts anything.
  const claim = options.natsUrl === undefined ? await claimHome(home) : undefined;
  let embedded: EmbeddedNats | undefined;
  let bus: JetStreamBus | undefined;
  try {
    embedded =
      options.natsUrl === undefined
        ? await startNatsServer({ dataDir: resolve(home, 'nats'), logFile: resolve(home, 'nats-server.log') })
        : undefined;
    if (embedded) await claim?.started(embedded.pid);
    const url = options.natsUrl ?? embedded?.url ?? '';
    bus = await connectBus({
      servers: url,
      name: 'troupe-coordinator',
      ...(options.natsAccess && !embedded ? { access: options.natsAccess } : {}),
      logger: options.logger,
      // Joining a server that may be restarting: wait for it, as start-up waits for JetStream.
      ...(embedded ? {} : { waitForServerMs: DEFAULT_OUTAGE_MS }),
      ...(options.eventBatch === undefined ? {} : { eventBatch: options.eventBatch }),
      ...(options.signal ? { signal: options.signal } : {}),
    });
    // A stop while the coordinator waits for JetStream closes the connection, which ends every such wait.
    const connecting = bus;
    const abortStart = () => void connecting.close();
    options.signal?.addEventListener('abort', abortStart, { once: true });
    const unwatch = options.metrics?.watch(bus);
    const coordinator = await startCoordinator({
      ...coordinatorSettings(options),
      bus,
      pipelines,
      workspaceRoot: resolve(home, 'workspaces'),
      registry,
      // Its own server: no other coordinator's version can be the one to keep.
      ...(embedded ? { takeNewest: true } : {}),
    }).finally(() => options.signal?.removeEventListener('abort', abortStart));
    if (embedded) {
      await writeServerRecord(home, {
        url,
        pid: process.pid,
        natsPid: embedded.pid,
        startedAt: new Date().toISOString(),
      });
    }
    options.logger.info(
      { url, embedded: embedded !== undefined, pipelines: coordinator.pipelines },
      `troupe is up on ${url}`,
    );
    const watching = options.watch
      ? watchPipelines({
          pipelines,
          load,
          reload: (pipeline) => coordinator.reload(pipeline),
          logger: options.logger,
          ...(options.watch === true ? {} : options.watch),
        })
      : undefined;
    const connected = bus;
    const server = embedded;
    const { logger } = options;
    const ackWaitMs = options.ackWaitMs ?? 30_000;
    return {
      url,
      embedded,
      pipelines,
      coordinator,
      bus: connected,
      async stop(timeoutMs = DEFAULT_STOP_TIMEOUT_MS) {
        const started = performance.now();
        const left = () => timeoutMs - (performance.now() - started);
        // The embedded server's own stop (which kills it after 5 s) comes last and gets the end of the time.
        const serverShare = server ? Math.min(5_000, timeoutMs / 4) : 0;
        // A reload under way finishes first: it stores and registers a version, which a half-closed connection would cut short.
        if (watching) await withTimeout(watching.close(), Math.min(5_000, timeoutMs / 10));
        const inHand = coordinator.running();
        if (!connected.reachable && inHand.length > 0) {
          logger.warn(
            { tasks: inHand, ackWaitMs },
            `stopping while NATS is unreachable: ${inHand.length} tasks running here are handed back only if it ` +
              `returns within ${STOP_OUTAGE_WAIT_MS / 1000} s; else NATS gives them to a coordinator again after the ack wait (${ackWaitMs / 1000} s)`,
          );
        }
        const handingBack = await stopWithin(
          'the coordinator',
          () => coordinator.stop(),
          (timeoutMs - serverShare) * 0.6,
          { logger, bus: connected },
        );
        if (handingBack === 'timeout' || handingBack === 'unreachable') {
          const unsettled = coordinator.running();
          const why =
            handingBack === 'timeout'
              ? "within the stop's time"
              : `with NATS unreachable for ${STOP_OUTAGE_WAIT_MS / 1000} s`;
          logger.warn(
            { tasks: unsettled, ackWaitMs },
            `the coordinator had not handed back ${unsettled.length} tasks ${why}; they are left to ` +
              `redelivery after the ack wait (${ackWaitMs / 1000} s)`,
          );
        }
        unwatch?.();
        await connected.drain(left() - serverShare);
        if (server) {
          await removeServerRecord(home, process.pid).catch(() => undefined);
          await stopWithin('the embedded nats-server', () => server.stop(), left(), { logger });
        }
        await claim
          ?.release()
          .catch((error: unknown) => logger.warn({ err: error }, 'could not release the home'));
      },
    };
  } catch (error) {
    // Whatever did start is stopped, so the process can exit with the error (a live connection would keep it up).
    await bus?.close();
    await embedded?.stop();
    await claim?.release();
    throw error;
  }
}

export interface WorkerOptions extends HostOptions {
  /** The NATS server the coordinators use. */
  natsUrl: string;
  /** Only these agents; all agents of the pipelines when absent. */
  agents?: readonly string[];
  /** How long a step's model call waits before its agent actor is parked (`troupe worker --passivate-after`); 0 parks none. */
  parkAfterMs?: number;
}

/** A worker process: agents only, no workflows. */
export interface Worker {
  url: string;
  serving: ReadonlyMap<string, readonly string[]>;
  /**
   * Stops its steps (their coordinators send them to another worker), drains the connection: all within
   * `timeoutMs` (default {@link DEFAULT_STOP_TIMEOUT_MS}) whatever NATS is doing. Never rejects.
   */
  stop(timeoutMs?: number): Promise<void>;
}

/**
 * Starts `troupe worker`: serves the pipelines' agents (or some of them) on a NATS server that coordinators use,
 * in the same queue groups, so each worker adds capacity. It runs no workflows and takes no tasks.
 */
export async function startWorker(options: WorkerOptions): Promise<Worker> {
  registerSecretsFromEnv();
  const home = resolve(options.home ?? '.troupe');
  const registry = builtinTools();
  const pipelines = await Promise.all(
    options.files.map((f) =>
      loadPipeline(f, {
        toolNames: registry.names(),
        allowMcpCommands: options.allowMcpCommands ?? process.env.TROUPE_ALLOW_MCP_COMMANDS === '1',
        ...(options.importModule ? { importModule: options.importModule } : {}),
        logger: options.logger,
      }),
    ),
  );
  const known = [...new Set(pipelines.flatMap((p) => Object.keys(p.config.agents)))];
  const unknown = (options.agents ?? []).filter((a) => !known.includes(a));
  if (unknown.length > 0) {
    const files = options.files.join(', ');
    const names = unknown.map((name) => `${name}${suggestion(name, known)}`).join(', ');
    const why = `no agent named ${names} in ${files}; ${options.files.length === 1 ? 'it has' : 'they have'}: ${known.join(', ')}`;
    throw new ConfigError(files, [{ path: '', message: why }], { headline: why });
  }
  const bus = await connectBus({
    waitForServerMs: DEFAULT_OUTAGE_MS,
    servers: options.natsUrl,
    name: 'troupe-worker',
    ...(options.natsAccess ? { access: options.natsAccess } : {}),
    ...(options.eventBatch === undefined ? {} : { eventBatch: options.eventBatch }),
    logger: options.logger,
    ...(options.signal ? { signal: options.signal } : {}),
  });
  // A stop while it waits for JetStream closes the connection, which ends every such wait.
  const abortStart = () => void bus.close();
  options.signal?.addEventListener('abort', abortStart, { once: true });
  const unwatch = options.metrics?.watch(bus);
  try {
    // A worker's NATS user may not create them on a locked-down server: it then waits for a coordinator to.
    await ensureOrAwaitTroupeStreams(bus, {
      ...(options.replicas === undefined ? {} : { replicas: options.replicas }),
      ...(options.signal ? { signal: options.signal } : {}),
    });
    const agents = await startAgentService({
      bus,
      pipelines,
      logger: options.logger,
      workspaceRoot: resolve(home, 'workspaces'),
      registry,
      ...(options.agents ? { only: options.agents } : {}),
      ...(options.metrics ? { metrics: options.metrics } : {}),
      ...(options.parkAfterMs === undefined ? {} : { parkAfterMs: options.parkAfterMs }),
    });
    // A pipeline reloaded or deployed with a new agent gets it served here too, without a restart.
    const unfollow = await serveNewestAgents(
      bus,
      pipelines.map((p) => p.config.name),
      agents,
      options.logger,
    ).catch(async (error: unknown) => {
      await agents.stop();
      throw error;
    });
    return {
      url: options.natsUrl,
      serving: agents.serving,
      async stop(timeoutMs = DEFAULT_STOP_TIMEOUT_MS) {
        const started = performance.now();
        unfollow();
        await stopWithin('the agents', () => agents.stop(), timeoutMs * 0.6, { logger: options.logger, bus });
        unwatch?.();
        await bus.drain(timeoutMs - (performance.now() - started));
      },
    };
  } catch (error) {
    await bus.close();
    throw error;
  } finally {
    options.signal?.removeEventListener('abort', abortStart);
  }
}

/** What of `options` goes to the coordinator unchanged: all but what `troupe up` itself acts on. */
function coordinatorSettings(
  options: ServiceOptions,
): CoordinatorSettings & Pick<HostOptions, 'replicas' | 'metrics' | 'logger'> {
  const { files, natsUrl, natsAccess, home, allowMcpCommands, signal, watch, importModule, ...settings } =
    options;
  return settings;
}
