import {
  ConfigError,
  DEFAULT_INTAKE_LIMITS,
  HomeBusyError,
  readServerRecord,
  type Service,
  startService,
} from '@troupe/coordinator';
import { MAX_TASK_DEPTH, MAX_TIMER_MS, MIN_HEARTBEAT_MS } from '@troupe/protocol';
import type { NatsAccess, NatsAccessSources } from '@troupe/runtime';
import {
  createLogger,
  McpServerError,
  startTracing,
  TransportError,
  type TroupeMetrics,
  withTimeout,
} from '@troupe/runtime';
import type { Gateway } from '../gatewayOption.ts';
import { natsUrlFromEnv, resolveHome } from '../home.ts';
import { logUnhandledRejections } from '../lastResort.ts';
import { startMetrics } from '../metricsOption.ts';
import { eventBatchOf } from '../program/options.ts';
import { CliError, natsAccessOf } from '../server.ts';
import { stopTimeoutMsOf, untilStopped } from '../signals.ts';
import { importToolModule } from '../toolModuleImport.ts';

export interface UpOptions extends NatsAccessSources {
  home?: string;
  server?: string;
  /** Join the server of the `troupe up` already running on this home instead of refusing to start. */
  join?: boolean;
  agents: boolean;
  /** False (`--no-local-steps`): every step goes over NATS, none runs in this process's own hosts first. */
  localSteps?: boolean;
  /** `--event-batch` (true) or `--no-event-batch` (false); neither, `TROUPE_EVENT_BATCH` decides (see `eventBatchOf`). */
  eventBatch?: boolean;
  concurrency: number;
  maxInFlight?: number;
  /** Seconds. */
  ackWait?: number;
  /** Seconds. */
  stepHeartbeat?: number;
  /** Seconds; 0 turns passivation off. */
  passivateAfter?: number;
  /** Seconds; 0 writes every checkpoint at once. */
  checkpointLinger?: number;
  maxDeliver?: number;
  maxTaskBytes?: number;
  maxTaskDepth?: number;
  maxInputBytes?: number;
  /** Milliseconds. */
  eventsMaxAge?: number;
  /** Bytes. */
  eventsMaxBytes?: number;
  /** Servers of a JetStream cluster that keep each stream and bucket. */
  replicas?: number;
  /** `[host:]port` of the metrics server. */
  metrics?: string;
  logLevel: string;
  allowMcpCommands?: boolean;
  /** `[host:]port` of the gateway, when one is served beside the coordinator. */
  gateway?: string;
  gatewayTokens?: string;
  gatewayNoAuth?: boolean;
  gatewayPublicUrl?: string;
  gatewayIdSecret?: string;
  gatewayMaxStreams?: number;
  gatewayMaxConsumers?: number;
  /** Bytes: the largest workspace file the gateway serves (it serves this home's workspaces). */
  gatewayMaxFileSize?: number;
  corsOrigin?: string[];
  /** Seconds a stop may take before the process exits anyway. */
  stopTimeout?: number;
  /** Reload a pipeline when its file (or a script it names) changes. */
  watch?: boolean;
  json: boolean;
}

/** Of a stop's time, what is kept for the metrics server and the traces to close once the service has stopped. */
const AFTER_SERVICE_MS = 500;

/** `troupe up`: runs the coordinator (and an embedded nats-server without NATS_URL) until SIGINT or SIGTERM. */
export async function up(files: string[], options: UpOptions): Promise<number> {
  const logger = createLogger({ level: options.logLevel, pretty: process.stdout.isTTY && !options.json });
  logUnhandledRejections(logger);
  const home = resolveHome(options.home);
  const natsUrl =
    options.server ?? natsUrlFromEnv() ?? (options.join ? await runningServer(home) : undefined);
  // Traces go out over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set; otherwise nothing is loaded.
  const tracing = await startTracing({ service: 'troupe-coordinator', logger });
  const served = await startMetrics(options.metrics, logger);
  const natsAccess = natsUrl === undefined ? undefined : await natsAccessOf(options);
  // A stop signal during start-up ends a wait for NATS too.
  const startUp = new AbortController();
  const starting = start(
    files,
    { ...options, home },
    natsUrl,
    logger,
    served?.metrics,
    natsAccess,
    startUp.signal,
  );
  // Listening before anything starts: a Ctrl-C during start-up stops what did start, cleanly.
  let gateway: Gateway | undefined;
  let started: Service | undefined;
  const stopped = untilStopped(
    async (timeoutMs) => {
      const deadline = performance.now() + timeoutMs;
      const left = () => Math.max(0, deadline - performance.now());
      startUp.abort();
      // Its requests under way get a fifth of the time: it has cut their sockets itself within its quarter.
      if (gateway)
        await withTimeout(gateway.close({ graceMs: left() / 5 }), left() / 4).catch(() => undefined);
      await (await starting.catch(() => undefined))?.stop(left() - AFTER_SERVICE_MS);
      await withTimeout(Promise.allSettled([served?.server.close(), tracing?.shutdown()]), left());
    },
    'stopping: running tasks are handed back to NATS and resume on the next start',
    {
      timeoutMs: stopTimeoutMsOf(options.stopTimeout),
      leftBehind: () => (started ? leftBehind(started) : undefined),
      // The embedded server is this process's child: it does not outlive it.
      beforeExit: () => started?.embedded && killQuietly(started.embedded.pid),
    },
  );
  let service: Service;
  try {
    service = await starting;
  } catch (error) {
    if (!startUp.signal.aborted) throw error;
    await stopped;
    return 0;
  }
  started = service;
  if (options.gateway !== undefined) {
    try {
      // Loaded only when asked for (another bundle): the HTTP server's modules are not part of a plain start.
      const { serveGateway, UP_GATEWAY_FLAGS } = await import('./gateway.ts');
      gateway = await serveGateway(
        service.bus,
        {
          listen: options.gateway,
          flags: UP_GATEWAY_FLAGS,
          ...(options.gatewayTokens === undefined ? {} : { tokens: options.gatewayTokens }),
          auth: !options.gatewayNoAuth,
          corsOrigin: options.corsOrigin ?? [],
          home,
          ...(options.gatewayPublicUrl === undefined ? {} : { publicUrl: options.gatewayPublicUrl }),
          ...(options.gatewayIdSecret === undefined ? {} : { idSecret: options.gatewayIdSecret }),
          ...(options.gatewayMaxStreams === undefined ? {} : { maxStreams: options.gatewayMaxStreams }),
          ...(options.gatewayMaxConsumers === undefined ? {} : { maxConsumers: options.gatewayMaxConsumers }),
          ...(options.gatewayMaxFileSize === undefined ? {} : { maxFileSize: options.gatewayMaxFileSize }),
          // The gateway refuses what this coordinator would.
          ...(options.maxTaskBytes === undefined ? {} : { maxTaskBytes: options.maxTaskBytes }),
          ...(options.maxTaskDepth === undefined ? {} : { maxTaskDepth: options.maxTaskDepth }),
          ...(options.maxInputBytes === undefined ? {} : { maxInputBytes: options.maxInputBytes }),
        },
        logger,
      );
    } catch (error) {
      await service.stop();
      throw error;
    }
  }
  const names = service.pipelines.map((p) => p.config.name);
  process.stderr.write(
    `troupe is up on ${service.url}${service.embedded ? ' (embedded nats-server)' : ''}; pipelines: ${names.join(', ')}\n` +
      `  submit a task:  troupe submit ${names[0]} "your goal"   (or: nats pub troupe.tasks.${names[0]} '{"goal":"…"}')\n` +
      '  watch the flow: troupe tail\n' +
      (gateway ? `  gateway:        ${gateway.url}\n` : ''),
  );
  await stopped;
  return 0;
}

/** What a stop cut short leaves: the tasks running here (NATS redelivers them) and events not yet stored. */
function leftBehind(service: Service): string | undefined {
  const tasks = service.coordinator.running();
  const events = service.bus.pendingEvents;
  const parts = [
    ...(tasks.length > 0
      ? [`${tasks.length} tasks (${tasks.join(', ')}) to NATS, which redelivers them after the ack wait`]
      : []),
    ...(events > 0 ? [`${events} events not stored`] : []),
  ];
  return parts.length > 0 ? parts.join(' and ') : undefined;
}

function killQuietly(pid: number): void {
  try {
    process.kill(pid, 'SIGTERM');
  } catch {
    // Gone already.
  }
}

/** The URL of the `troupe up` running on this home, for `--join`. */
async function runningServer(home: string): Promise<string> {
  const record = await readServerRecord(home);
  if (record) return record.url;
  throw new CliError(`no troupe up is running on ${home} to join; start one without --join`);
}

export async function start(
  files: string[],
  options: Pick<
    UpOptions,
    | 'home'
    | 'agents'
    | 'localSteps'
    | 'eventBatch'
    | 'concurrency'
    | 'maxInFlight'
    | 'allowMcpCommands'
    | 'ackWait'
    | 'stepHeartbeat'
    | 'passivateAfter'
    | 'checkpointLinger'
    | 'maxDeliver'
    | 'maxTaskBytes'
    | 'maxTaskDepth'
    | 'maxInputBytes'
    | 'eventsMaxAge'
    | 'eventsMaxBytes'
    | 'replicas'
    | 'watch'
  >,
  natsUrl: string | undefined,
  logger: ReturnType<typeof createLogger>,
  metrics?: TroupeMetrics,
  natsAccess?: NatsAccess,
  signal?: AbortSignal,
): Promise<Service> {
  if (options.maxTaskDepth !== undefined && options.maxTaskDepth > MAX_TASK_DEPTH) {
    throw new CliError(
      `--max-task-depth must be at most ${MAX_TASK_DEPTH} (every message is capped deeper)`,
      2,
    );
  }
  const eventBatch = eventBatchOf(options.eventBatch);
  // Hosts refuse a step asking for a heartbeat outside these bounds: every step would fail.
  const heartbeatMs =
    options.stepHeartbeat === undefined ? undefined : Math.round(options.stepHeartbeat * 1000);
  if (heartbeatMs !== undefined && (heartbeatMs < MIN_HEARTBEAT_MS || heartbeatMs > MAX_TIMER_MS)) {
    throw new CliError(
      `--step-heartbeat must be between ${MIN_HEARTBEAT_MS / 1000} and ${Math.floor(MAX_TIMER_MS / 1000)} seconds`,
      2,
    );
  }
  // Below a millisecond is one, not 0 (which writes every checkpoint); past what a timer holds, Node fires at once.
  const checkpointLingerMs =
    options.checkpointLinger === undefined ? undefined : Math.ceil(options.checkpointLinger * 1000);
  if (checkpointLingerMs !== undefined && checkpointLingerMs > MAX_TIMER_MS) {
    throw new CliError(`--checkpoint-linger must be at most ${Math.floor(MAX_TIMER_MS / 1000)} seconds`, 2);
  }
  try {
    return await startService({
      files,
      home: resolveHome(options.home),
      hostAgents: options.agents,
      importModule: importToolModule,
      concurrency: options.concurrency,
      ...(options.localSteps === false ? { maxLocalSteps: 0 } : {}),
      eventBatch,
      ...(options.maxInFlight === undefined ? {} : { maxInFlight: options.maxInFlight }),
      ...(options.ackWait === undefined ? {} : { ackWaitMs: Math.round(options.ackWait * 1000) }),
      ...(options.maxDeliver === undefined ? {} : { maxDeliver: options.maxDeliver }),
      ...(heartbeatMs === undefined ? {} : { stepHeartbeatMs: heartbeatMs }),
      ...(options.passivateAfter === undefined
        ? {}
        : { passivateAfterMs: Math.round(options.passivateAfter * 1000) }),
      ...(checkpointLingerMs === undefined ? {} : { checkpointLingerMs }),
      ...(options.allowMcpCommands ? { allowMcpCommands: true } : {}),
      eventRetention: {
        ...(options.eventsMaxAge === undefined ? {} : { maxAgeMs: options.eventsMaxAge }),
        ...(options.eventsMaxBytes === undefined ? {} : { maxBytes: options.eventsMaxBytes }),
      },
      limits: {
        maxTaskBytes: options.maxTaskBytes ?? DEFAULT_INTAKE_LIMITS.maxTaskBytes,
        maxTaskDepth: options.maxTaskDepth ?? DEFAULT_INTAKE_LIMITS.maxTaskDepth,
        maxInputBytes: options.maxInputBytes ?? DEFAULT_INTAKE_LIMITS.maxInputBytes,
      },
      logger,
      ...(metrics ? { metrics } : {}),
      ...(natsUrl === undefined ? {} : { natsUrl }),
      ...(natsAccess ? { natsAccess } : {}),
      ...(options.replicas === undefined ? {} : { replicas: options.replicas }),
      ...(signal ? { signal } : {}),
      ...(options.watch ? { watch: true } : {}),
    });
  } catch (error) {
    if (error instanceof HomeBusyError) {
      throw new CliError(
        `${error.message}: stop it first, or add --join to run another coordinator on its server`,
      );
    }
    if (error instanceof ConfigError) throw new CliError(error.message, 2);
    if (error instanceof TransportError || error instanceof McpServerError) throw new CliError(error.message);
    throw error;
  }
}
