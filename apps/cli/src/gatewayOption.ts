import { type Gateway, startGateway, TokenStore } from '@troupe/gateway';

export type { Gateway };

import { errorMessage } from '@troupe/protocol';
import { type Logger, type NatsBus, parseListen } from '@troupe/runtime';
import { CliError } from './server.ts';

/** How `troupe gateway` and `troupe up --gateway` serve HTTP. */
export interface GatewayServeOptions {
  /** `[host:]port`; the host is 127.0.0.1 unless given. */
  listen: string;
  /** A tokens file (`troupe token` writes one); `TROUPE_GATEWAY_TOKEN` adds an admin token. */
  tokens?: string;
  /** False with `--no-auth`: no token asked (loopback only). */
  auth: boolean;
  /** Origins a browser page may call from (CORS). */
  corsOrigin: string[];
}

const LOOPBACK = new Set(['127.0.0.1', 'localhost', '::1']);

/** Starts the gateway on `bus`; a bad option, an unreadable tokens file or a taken port stops the command. */
export async function serveGateway(
  bus: NatsBus,
  options: GatewayServeOptions,
  logger: Logger,
): Promise<Gateway> {
  const where = parseListen(options.listen);
  if (!where) {
    throw new CliError(
      `--listen must be a port or host:port, such as 8080 or 0.0.0.0:8080 (got "${options.listen}")`,
      2,
    );
  }
  let tokens: TokenStore;
  try {
    tokens = await TokenStore.load(options.tokens);
  } catch (error) {
    throw new CliError(errorMessage(error), 2);
  }
  if (options.auth && tokens.size === 0) {
    throw new CliError(
      'the gateway has no token to accept: give --tokens <file> (troupe token writes one) or set TROUPE_GATEWAY_TOKEN; ' +
        'for a gateway on this machine only, --no-auth',
      2,
    );
  }
  if (!options.auth && !LOOPBACK.has(where.host)) {
    throw new CliError(`--no-auth serves only on this machine (127.0.0.1), not on ${where.host}`, 2);
  }
  try {
    return await startGateway({
      bus,
      logger,
      tokens,
      auth: options.auth ? 'tokens' : 'none',
      host: where.host,
      port: where.port,
      corsOrigins: options.corsOrigin,
    });
  } catch (error) {
    throw new CliError(`cannot serve the gateway on ${where.host}:${where.port}: ${errorMessage(error)}`);
  }
}
