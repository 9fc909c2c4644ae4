import { chmod, readFile, writeFile } from 'node:fs/promises';
import { hashToken, newToken, Scope, TokenEntry, TokensFile } from '@troupe/gateway';
import { errorMessage, formatIssues } from '@troupe/protocol';
import type { NatsAccessSources } from '@troupe/runtime';
import { connectBus, createLogger, type JetStreamBus, withTimeout } from '@troupe/runtime';
import { parse as parseYaml, stringify } from 'yaml';
import { type GatewayServeOptions, serveGateway, UP_GATEWAY_FLAGS } from '../gatewayOption.ts';

/** For `troupe up --gateway`, which loads this bundle only then. */
export { serveGateway, UP_GATEWAY_FLAGS };

import { logUnhandledRejections } from '../lastResort.ts';
import { CliError, natsAccessOf, resolveServer } from '../server.ts';
import { stopTimeoutMsOf, untilStopped } from '../signals.ts';

export interface GatewayCommandOptions extends GatewayServeOptions, NatsAccessSources {
  home?: string;
  server?: string;
  logLevel: string;
  /** Seconds a stop may take before the process exits anyway. */
  stopTimeout?: number;
  json: boolean;
}

/** `troupe gateway`: serves the HTTP/SSE API over the NATS server of a running Troupe until SIGINT or SIGTERM. */
export async function gateway(options: GatewayCommandOptions): Promise<number> {
  const logger = createLogger({ level: options.logLevel, pretty: process.stdout.isTTY && !options.json });
  logUnhandledRejections(logger);
  const natsUrl = await resolveServer(options);
  const access = await natsAccessOf(options);
  let bus: JetStreamBus;
  try {
    bus = await connectBus({
      servers: natsUrl,
      name: 'troupe-gateway',
      logger,
      ...(access ? { access } : {}),
    });
  } catch (error) {
    throw new CliError(`cannot reach NATS at ${natsUrl}: ${errorMessage(error)}`);
  }
  let served: Awaited<ReturnType<typeof serveGateway>>;
  try {
    served = await serveGateway(bus, options, logger);
  } catch (error) {
    await bus.close();
    throw error;
  }
  process.stderr.write(`troupe gateway on ${served.url} over ${natsUrl}\n`);
  await untilStopped(
    async (timeoutMs) => {
      // Requests still under way get most of the time (then their sockets are cut); the connection closes after.
      await withTimeout(served.close({ graceMs: timeoutMs * 0.7 }), timeoutMs * 0.8).catch(() => undefined);
      await bus.close();
    },
    'stopping the gateway',
    { timeoutMs: stopTimeoutMsOf(options.stopTimeout) },
  );
  return 0;
}

export interface TokenCommandOptions {
  file: string;
  scope: string[];
  pipeline: string[];
}

/**
 * `troupe token <name>`: makes a gateway token, writes its SHA-256 (never the token) to the tokens file, and
 * prints the token once.
 */
export async function token(name: string, options: TokenCommandOptions): Promise<number> {
  const scopes = options.scope.length > 0 ? options.scope : ['read'];
  const candidate = {
    name,
    sha256: hashToken('placeholder'),
    scopes,
    ...(options.pipeline.length > 0 ? { pipelines: options.pipeline } : {}),
  };
  const parsed = TokenEntry.safeParse(candidate);
  if (!parsed.success) {
    const problems = formatIssues(parsed.error.issues).map((i) => `${i.path || 'token'}: ${i.message}`);
    throw new CliError(`${problems.join('; ')} (scopes: ${Scope.options.join(', ')})`, 2);
  }
  let existing: TokenEntry[] = [];
  const text = await readFile(options.file, 'utf8').catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return undefined;
    throw new CliError(`cannot read ${options.file}: ${error.message}`);
  });
  if (text !== undefined && text.trim() !== '') {
    const file = TokensFile.safeParse(parseYaml(text));
    if (!file.success)
      throw new CliError(`${options.file} is not a tokens file: ${file.error.issues[0]?.message}`, 2);
    existing = file.data.tokens;
  }
  if (existing.some((t) => t.name === name)) {
    throw new CliError(`${options.file} has a token named ${name} already; remove it first to replace it`, 2);
  }
  const secret = newToken();
  const entry: TokenEntry = { ...parsed.data, sha256: hashToken(secret) };
  await writeFile(options.file, stringify({ tokens: [...existing, entry] }), { mode: 0o600 });
  // The mode above applies to a file made now; one that was there is narrowed too.
  await chmod(options.file, 0o600);
  process.stderr.write(
    `token ${name} (${entry.scopes.join(', ')}) added to ${options.file}; it is shown once:\n`,
  );
  process.stdout.write(`${secret}\n`);
  return 0;
}
