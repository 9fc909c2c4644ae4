import {
  ConfigError,
  DEFAULT_INTAKE_LIMITS,
  MAX_TASK_DEPTH,
  type Service,
  startService,
} from '@troupe/coordinator';
import { createLogger, McpServerError, TransportError } from '@troupe/runtime';
import { logUnhandledRejections } from '../lastResort.ts';
import { CliError } from '../server.ts';

export interface UpOptions {
  home: string;
  server?: string;
  agents: boolean;
  concurrency: number;
  /** Seconds. */
  ackWait?: number;
  /** Seconds. */
  stepHeartbeat?: number;
  maxDeliver?: number;
  maxTaskBytes?: number;
  maxTaskDepth?: number;
  logLevel: string;
  allowMcpCommands?: boolean;
  json: boolean;
}

/** `troupe up`: runs the coordinator (and an embedded nats-server without NATS_URL) until SIGINT or SIGTERM. */
export async function up(files: string[], options: UpOptions): Promise<number> {
  const logger = createLogger({ level: options.logLevel, pretty: process.stdout.isTTY && !options.json });
  logUnhandledRejections(logger);
  const natsUrl = options.server ?? process.env.NATS_URL;
  const service = await start(files, options, natsUrl, logger);
  const names = service.pipelines.map((p) => p.config.name);
  process.stderr.write(
    `troupe is up on ${service.url}${service.embedded ? ' (embedded nats-server)' : ''}; pipelines: ${names.join(', ')}\n` +
      `  submit a task:  troupe submit ${names[0]} "your goal"   (or: nats pub troupe.tasks.${names[0]} '{"goal":"…"}')\n` +
      '  watch the flow: troupe tail\n',
  );
  await untilSignal(service);
  return 0;
}

export async function start(
  files: string[],
  options: Pick<
    UpOptions,
    | 'home'
    | 'agents'
    | 'concurrency'
    | 'allowMcpCommands'
    | 'ackWait'
    | 'stepHeartbeat'
    | 'maxDeliver'
    | 'maxTaskBytes'
    | 'maxTaskDepth'
  >,
  natsUrl: string | undefined,
  logger: ReturnType<typeof createLogger>,
): Promise<Service> {
  if (options.maxTaskDepth !== undefined && options.maxTaskDepth > MAX_TASK_DEPTH) {
    throw new CliError(
      `--max-task-depth must be at most ${MAX_TASK_DEPTH} (every message is capped deeper)`,
      2,
    );
  }
  try {
    return await startService({
      files,
      home: options.home,
      hostAgents: options.agents,
      concurrency: options.concurrency,
      ...(options.ackWait === undefined ? {} : { ackWaitMs: Math.round(options.ackWait * 1000) }),
      ...(options.maxDeliver === undefined ? {} : { maxDeliver: options.maxDeliver }),
      ...(options.stepHeartbeat === undefined
        ? {}
        : { stepHeartbeatMs: Math.round(options.stepHeartbeat * 1000) }),
      ...(options.allowMcpCommands ? { allowMcpCommands: true } : {}),
      limits: {
        maxTaskBytes: options.maxTaskBytes ?? DEFAULT_INTAKE_LIMITS.maxTaskBytes,
        maxTaskDepth: options.maxTaskDepth ?? DEFAULT_INTAKE_LIMITS.maxTaskDepth,
      },
      logger,
      ...(natsUrl === undefined ? {} : { natsUrl }),
    });
  } catch (error) {
    if (error instanceof ConfigError) throw new CliError(error.message, 2);
    if (error instanceof TransportError || error instanceof McpServerError) throw new CliError(error.message);
    throw error;
  }
}

/** Stops the service on the first SIGINT/SIGTERM; a second one exits at once. */
function untilSignal(service: Service): Promise<void> {
  return new Promise((resolve) => {
    const stop = () => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      process.once('SIGINT', () => process.exit(130));
      process.stderr.write('stopping: running tasks are handed back to NATS and resume on the next start\n');
      service.stop().then(resolve, (error: unknown) => {
        process.stderr.write(`error while stopping: ${(error as Error).message}\n`);
        resolve();
      });
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
}
