import { mkdir, stat } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import {
  type Gateway,
  loadOrCreateSecret,
  MIN_SECRET_CHARS,
  startGateway,
  TokenStore,
} from '@troupe/gateway';

export type { Gateway };

import { DEFAULT_TASK_LIMITS, errorMessage, MAX_TASK_DEPTH, type TaskLimits } from '@troupe/protocol';
import { type JetStreamBus, type Logger, parseListen } from '@troupe/runtime';
import { resolveHome } from './home.ts';
import { CliError } from './server.ts';

/** How `troupe gateway` and `troupe up --gateway` serve HTTP. */
export interface GatewayServeOptions {
  /** `[host:]port`; the host is 127.0.0.1 unless given. */
  listen: string;
  /** A tokens file (`troupe token` writes one); `TROUPE_GATEWAY_TOKEN` adds an admin token. */
  tokens?: string;
  /** False with `--no-auth`: no token asked (loopback only). */
  auth: boolean;
  /** Origins a browser page may call from (CORS) and open WebSockets from. */
  corsOrigin: string[];
  /** The URL clients reach the gateway at: its origin may open WebSockets, its host is trusted. */
  publicUrl?: string;
  /** The file of the secret idempotency keys' task ids are made with; made when absent. */
  idSecret?: string;
  /** Per-token caps on open event streams and on the NATS consumers they hold. */
  maxStreams?: number;
  maxConsumers?: number;
  /** The coordinators' task limits, when changed from the defaults (`troupe up` passes its own). */
  maxTaskBytes?: number;
  maxTaskDepth?: number;
  maxInputBytes?: number;
  /** The Troupe home: where the id secret is kept when there is no tokens file to keep it beside. */
  home?: string;
  /** Hosts A2A push webhooks may go to (any public host when none). */
  pushHost?: string[];
  /** Let A2A push webhooks reach private, loopback and link-local addresses. */
  pushPrivate?: boolean;
  /**
   * Where task workspaces are (`<dir>/<pipeline>/<taskId>`), served by `GET /v1/tasks/{id}/files`: `<home>/workspaces`
   * when absent (where `troupe up` and `troupe worker` on this home keep them); false serves none.
   */
  workspaces?: string | false;
  /** The largest workspace file served, in bytes. */
  maxFileSize?: number;
  /** The flags these options came from, for the hints of an error: `troupe up` names them its own way. */
  flags?: GatewayFlags;
}

/** The command-line flags a gateway's start-up errors point to. */
export interface GatewayFlags {
  listen: string;
  tokens: string;
  noAuth: string;
  publicUrl: string;
  corsOrigin: string;
  maxStreams: string;
  maxConsumers: string;
  maxFileSize: string;
}

/** `troupe gateway`'s own flags. */
export const GATEWAY_FLAGS: GatewayFlags = {
  listen: '--listen',
  tokens: '--tokens',
  noAuth: '--no-auth',
  publicUrl: '--public-url',
  corsOrigin: '--cors-origin',
  maxStreams: '--max-streams',
  maxConsumers: '--max-consumers',
  maxFileSize: '--max-file-size',
};

/** `troupe up --gateway`'s: the same options, under `up`'s names. */
export const UP_GATEWAY_FLAGS: GatewayFlags = {
  listen: '--gateway',
  tokens: '--gateway-tokens',
  noAuth: '--gateway-no-auth',
  publicUrl: '--gateway-public-url',
  corsOrigin: '--cors-origin',
  maxStreams: '--gateway-max-streams',
  maxConsumers: '--gateway-max-consumers',
  maxFileSize: '--gateway-max-file-size',
};

/**
 * The secret idempotency keys' ids are made with: `$TROUPE_GATEWAY_SECRET`, else the file `--id-secret` names, else
 * `troupe-gateway-secret` beside the tokens file (or in the home without one), made on first use. Every gateway of a
 * deployment must have the same.
 */
async function idSecretOf(options: GatewayServeOptions): Promise<string> {
  const fromEnv = process.env.TROUPE_GATEWAY_SECRET;
  if (fromEnv) {
    if (fromEnv.length < MIN_SECRET_CHARS)
      throw new CliError(`TROUPE_GATEWAY_SECRET is shorter than ${MIN_SECRET_CHARS} characters`, 2);
    return fromEnv;
  }
  const file =
    options.idSecret ??
    join(options.tokens ? dirname(options.tokens) : resolveHome(options.home), 'troupe-gateway-secret');
  try {
    await mkdir(dirname(file), { recursive: true });
    return await loadOrCreateSecret(file);
  } catch (error) {
    throw new CliError(errorMessage(error), 2);
  }
}

/**
 * The workspaces the gateway serves files from: `--workspaces`, which must be a directory, else the home's (which
 * need not exist yet: `troupe up` makes it with the first task), or none with `--no-workspaces`.
 */
async function workspacesOf(options: GatewayServeOptions): Promise<string | undefined> {
  if (options.workspaces === false) return undefined;
  if (options.workspaces === undefined) return join(resolveHome(options.home), 'workspaces');
  const dir = resolve(options.workspaces);
  const isDir = await stat(dir).then(
    (s) => s.isDirectory(),
    () => false,
  );
  if (!isDir) {
    throw new CliError(
      `--workspaces ${options.workspaces} is not a directory: give the workspaces directory of a troupe up or troupe worker (<home>/workspaces), or a volume they share`,
      2,
    );
  }
  return dir;
}

const LOOPBACK = new Set(['127.0.0.1', 'localhost', '::1']);

/** Starts the gateway on `bus`; a bad option, an unreadable tokens file or a taken port stops the command. */
export async function serveGateway(
  bus: JetStreamBus,
  options: GatewayServeOptions,
  logger: Logger,
): Promise<Gateway> {
  const flags = options.flags ?? GATEWAY_FLAGS;
  const where = parseListen(options.listen);
  if (!where) {
    throw new CliError(
      `${flags.listen} must be a port or host:port, such as 8080 or 0.0.0.0:8080 (got "${options.listen}")`,
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
      `the gateway has no token to accept: give ${flags.tokens} <file> (troupe token writes one) or set TROUPE_GATEWAY_TOKEN; ` +
        `for a gateway on this machine only, ${flags.noAuth}`,
      2,
    );
  }
  if (!options.auth && !LOOPBACK.has(where.host)) {
    throw new CliError(`${flags.noAuth} serves only on this machine (127.0.0.1), not on ${where.host}`, 2);
  }
  if (options.publicUrl !== undefined && !URL.canParse(options.publicUrl)) {
    throw new CliError(
      `${flags.publicUrl} must be a URL such as https://troupe.example.com (got "${options.publicUrl}")`,
      2,
    );
  }
  if (options.maxTaskDepth !== undefined && options.maxTaskDepth > MAX_TASK_DEPTH) {
    throw new CliError(
      `--max-task-depth must be at most ${MAX_TASK_DEPTH} (every message is capped deeper)`,
      2,
    );
  }
  const workspaces = await workspacesOf(options);
  const idSecret = await idSecretOf(options);
  // The coordinators' own limits: a task the gateway takes is one they run.
  const taskLimits: TaskLimits = {
    maxTaskBytes: options.maxTaskBytes ?? DEFAULT_TASK_LIMITS.maxTaskBytes,
    maxTaskDepth: options.maxTaskDepth ?? DEFAULT_TASK_LIMITS.maxTaskDepth,
    maxInputBytes: options.maxInputBytes ?? DEFAULT_TASK_LIMITS.maxInputBytes,
  };
  try {
    return await startGateway({
      bus,
      logger,
      tokens,
      auth: options.auth ? 'tokens' : 'none',
      host: where.host,
      port: where.port,
      corsOrigins: options.corsOrigin,
      idSecret,
      flags,
      ...(options.publicUrl === undefined ? {} : { publicUrl: options.publicUrl }),
      taskLimits,
      streamCaps: {
        ...(options.maxStreams === undefined ? {} : { streams: options.maxStreams }),
        ...(options.maxConsumers === undefined ? {} : { consumers: options.maxConsumers }),
      },
      ...(workspaces === undefined ? {} : { workspaces }),
      ...(options.maxFileSize === undefined ? {} : { maxFileBytes: options.maxFileSize }),
      a2aPush: {
        urlPolicy: { allowHosts: options.pushHost ?? [], allowPrivate: options.pushPrivate === true },
      },
    });
  } catch (error) {
    throw new CliError(`cannot serve the gateway on ${where.host}:${where.port}: ${errorMessage(error)}`);
  }
}
