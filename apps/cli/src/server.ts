import { readServerRecord } from '@troupe/coordinator';
import { isTaskId } from '@troupe/protocol';
import {
  connectBus,
  createLogger,
  type JetStreamBus,
  type Logger,
  type NatsAccess,
  NatsAccessError,
  type NatsAccessSources,
  readNatsAccess,
  type UntilReachableOptions,
} from '@troupe/runtime';
import { CliError, explain } from './cliError.ts';
import { natsUrlFromEnv, resolveHome } from './home.ts';

export { CliError, explain };

/** Refuses, with exit code 2, a task id given on the command line that no task can have. */
export function checkTaskId(taskId: string): void {
  if (!isTaskId(taskId)) throw new CliError(`"${taskId}" is not a task id (A-Z a-z 0-9 _ -, at most 64)`, 2);
}

/** A command a person waits for gives up on an unreachable JetStream in seconds, not minutes as services do. */
export const CLI_WAIT: UntilReachableOptions = { outageMs: 5_000, noJetStreamMs: 2_000 };

export interface ServerOptions extends NatsAccessSources {
  server?: string;
  /** See {@link resolveHome}. */
  home?: string;
}

/**
 * How a command logs in to NATS and talks TLS to it, from its options (or their environment variables); a file that
 * cannot be read, or options that cannot go together, are a usage error.
 */
export async function natsAccessOf(options: NatsAccessSources): Promise<NatsAccess | undefined> {
  try {
    // It reads only the access options among a command's; none given makes an empty access.
    const access = await readNatsAccess(options);
    return Object.keys(access).length > 0 ? access : undefined;
  } catch (error) {
    if (error instanceof NatsAccessError) throw new CliError(error.message, 2);
    throw error;
  }
}

/** The NATS URL to use: `--server`, else `NATS_URL`, else the one a running `troupe up` recorded. */
export async function resolveServer(options: ServerOptions): Promise<string> {
  const explicit = options.server ?? natsUrlFromEnv();
  if (explicit) return explicit;
  const home = resolveHome(options.home);
  const record = await readServerRecord(home);
  if (record) return record.url;
  throw new CliError(
    `no NATS server to talk to: set NATS_URL or --server, or start one with \`troupe up <pipeline.yaml>\` (looked for a running one in ${home}/server.json)`,
  );
}

/** A quiet bus for CLI commands: only warnings and worse are logged, to stderr. */
export async function connectCli(options: ServerOptions, name: string): Promise<JetStreamBus> {
  const servers = await resolveServer(options);
  const logger: Logger = createLogger({
    level: process.env.TROUPE_LOG_LEVEL ?? 'warn',
    destination: process.stderr as never,
    pretty: process.stderr.isTTY,
  });
  const access = await natsAccessOf(options);
  try {
    return await connectBus({
      servers,
      name,
      logger,
      messageLogLevel: 'debug',
      ...(access ? { access } : {}),
    });
  } catch (error) {
    throw new CliError((error as Error).message);
  }
}
