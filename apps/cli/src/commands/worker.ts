import { ConfigError, startWorker } from '@troupe/coordinator';
import type { NatsAccessSources } from '@troupe/runtime';
import { createLogger, McpServerError, startTracing, TransportError, withTimeout } from '@troupe/runtime';
import { resolveHome } from '../home.ts';
import { logUnhandledRejections } from '../lastResort.ts';
import { startMetrics } from '../metricsOption.ts';
import { eventBatchOf } from '../program/options.ts';
import { CliError, natsAccessOf, resolveServer } from '../server.ts';
import { stopTimeoutMsOf, untilStopped } from '../signals.ts';
import { importToolModule } from '../toolModuleImport.ts';

export interface WorkerCommandOptions extends NatsAccessSources {
  /** Servers of a JetStream cluster that keep each stream and bucket, should this worker make them. */
  replicas?: number;
  home?: string;
  server?: string;
  agents?: string;
  /** `--passivate-after`: seconds a step's model call waits before its agent actor is parked; 0 parks none. */
  passivateAfter?: number;
  /** `--event-batch` (true) or `--no-event-batch` (false); neither, `TROUPE_EVENT_BATCH` decides (see `eventBatchOf`). */
  eventBatch?: boolean;
  /** `[host:]port` of the metrics server. */
  metrics?: string;
  allowMcpCommands: boolean;
  logLevel: string;
  /** Seconds a stop may take before the process exits anyway. */
  stopTimeout?: number;
  json: boolean;
}

/** Of a stop's time, what is kept for the metrics server and the traces to close once the worker has stopped. */
const AFTER_WORKER_MS = 500;

/** `troupe worker`: serves agents of the given pipelines on the coordinators' NATS server until SIGINT/SIGTERM. */
export async function worker(files: string[], options: WorkerCommandOptions): Promise<number> {
  const eventBatch = eventBatchOf(options.eventBatch);
  const logger = createLogger({ level: options.logLevel, pretty: process.stdout.isTTY && !options.json });
  logUnhandledRejections(logger);
  const natsUrl = await resolveServer(options);
  const natsAccess = await natsAccessOf(options);
  const agents = options.agents
    ?.split(',')
    .map((a) => a.trim())
    .filter(Boolean);
  // Traces go out over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set; otherwise nothing is loaded.
  const tracing = await startTracing({ service: 'troupe-worker', logger });
  const served = await startMetrics(options.metrics, logger);
  // A stop signal during start-up ends a wait for a coordinator too.
  const startUp = new AbortController();
  const starting = startWorker({
    signal: startUp.signal,
    files,
    natsUrl,
    ...(natsAccess ? { natsAccess } : {}),
    ...(options.replicas === undefined ? {} : { replicas: options.replicas }),
    home: resolveHome(options.home),
    logger,
    allowMcpCommands: options.allowMcpCommands || process.env.TROUPE_ALLOW_MCP_COMMANDS === '1',
    importModule: importToolModule,
    ...(agents && agents.length > 0 ? { agents } : {}),
    eventBatch,
    ...(served ? { metrics: served.metrics } : {}),
    ...(options.passivateAfter === undefined
      ? {}
      : { parkAfterMs: Math.round(options.passivateAfter * 1000) }),
  });
  // Listening before anything starts: a Ctrl-C during start-up stops what did start, cleanly.
  const stopped = untilStopped(
    async (timeoutMs) => {
      const deadline = performance.now() + timeoutMs;
      const left = () => Math.max(0, deadline - performance.now());
      startUp.abort();
      await (await starting.catch(() => undefined))?.stop(left() - AFTER_WORKER_MS);
      await withTimeout(Promise.allSettled([served?.server.close(), tracing?.shutdown()]), left());
    },
    'stopping: steps in flight are handed back to be retried by another worker',
    {
      timeoutMs: stopTimeoutMsOf(options.stopTimeout),
      // A step cut short here goes to another worker once its coordinator misses its heartbeats.
      leftBehind: () => 'the steps running here to their coordinators, which retry them on another worker',
    },
  );
  let running: Awaited<typeof starting>;
  try {
    running = await starting;
  } catch (error) {
    if (startUp.signal.aborted) {
      await stopped;
      return 0;
    }
    if (error instanceof ConfigError) throw new CliError(error.message, 2);
    if (error instanceof TransportError || error instanceof McpServerError) throw new CliError(error.message);
    throw error;
  }
  const serving = [...running.serving]
    .map(([pipeline, names]) => `${pipeline}: ${names.join(', ')}`)
    .join('; ');
  process.stderr.write(`troupe worker on ${natsUrl} serving ${serving}\n`);
  await stopped;
  return 0;
}
