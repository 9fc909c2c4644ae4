import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { accessSync, constants, statSync } from 'node:fs';
import { mkdir, readFile } from 'node:fs/promises';
import { createConnection, createServer } from 'node:net';
import { delimiter, join } from 'node:path';
import { TransportError } from './transportError.ts';

export interface NatsServerOptions {
  /** JetStream's store directory; created when missing. */
  dataDir: string;
  /** 0 or undefined picks a free port. */
  port?: number;
  /** Address to listen on; default 127.0.0.1. */
  host?: string;
  /** Default true. */
  jetstream?: boolean;
  /** Where the server writes its log; by default its stderr is kept in memory for error messages. */
  logFile?: string;
  /** The nats-server executable; default {@link findNatsServer}. */
  binary?: string;
  /** How long to wait for the server to accept clients; default 10 s. */
  readyTimeoutMs?: number;
  /** A nats-server configuration file (users and permissions, TLS, a cluster); the options above override it. */
  configFile?: string;
  /**
   * The server's name; a fresh one by default. A node of a JetStream cluster keeps its name across restarts: the
   * cluster knows its peers by name.
   */
  serverName?: string;
}

/** A nats-server process this process started and owns. */
export interface EmbeddedNats {
  url: string;
  port: number;
  pid: number;
  dataDir: string;
  /** SIGTERM, then SIGKILL after 5 s; resolves once the process has exited. Safe to call twice. */
  stop(): Promise<void>;
}

const BINARY = process.platform === 'win32' ? 'nats-server.exe' : 'nats-server';
const FALLBACK_DIRS = ['/usr/sbin', '/usr/local/bin'];
const READY_TIMEOUT_MS = 10_000;
const KILL_AFTER_MS = 5_000;
const POLL_MS = 50;
const STDERR_KEEP = 8_000;
const TAIL_LINES = 20;
/** A free port can be taken by someone else before the server binds it; we pick another this many times. */
const PORT_ATTEMPTS = 3;

/** Says every way to get a NATS server: Troupe's npm packages cannot bring the binary with them. */
export const NATS_SERVER_MISSING_HELP =
  `nats-server was not found (looked on PATH and in ${FALLBACK_DIRS.join(', ')}). Install it ` +
  '(Debian/Ubuntu: `sudo apt-get install nats-server`; macOS: `brew install nats-server`; elsewhere: ' +
  'download the nats-server binary for your system from https://github.com/nats-io/nats-server/releases ' +
  'and put it on PATH), set NATS_SERVER_BIN to its path, or set NATS_URL to use a running server.';

/**
 * Finds the nats-server executable: `NATS_SERVER_BIN` when set (and then only there), else `PATH`,
 * `/usr/sbin` and `/usr/local/bin`.
 */
export function findNatsServer(): string | undefined {
  const configured = process.env.NATS_SERVER_BIN;
  if (configured !== undefined && configured !== '') return isExecutable(configured) ? configured : undefined;
  const dirs = [...(process.env.PATH ?? '').split(delimiter).filter((dir) => dir !== ''), ...FALLBACK_DIRS];
  return dirs.map((dir) => join(dir, BINARY)).find(isExecutable);
}

/**
 * Starts a local nats-server (JetStream on, listening on 127.0.0.1) and resolves once it accepts clients.
 * The server runs in its own process group, so the caller decides when it stops; it is killed if this process exits.
 *
 * @example
 * const nats = await startNatsServer({ dataDir: '.troupe/nats' });
 * const bus = await NatsBus.connect({ servers: nats.url, name: 'troupe-coordinator', logger });
 * // …
 * await nats.stop();
 */
export async function startNatsServer(opts: NatsServerOptions): Promise<EmbeddedNats> {
  const binary = opts.binary ?? findNatsServer();
  if (binary === undefined || !isExecutable(binary))
    throw missingServerError(binary ?? process.env.NATS_SERVER_BIN);
  await mkdir(opts.dataDir, { recursive: true });
  const host = opts.host ?? '127.0.0.1';
  const pickPort = opts.port === undefined || opts.port === 0;
  for (let attempt = 1; ; attempt++) {
    const port = pickPort ? await findFreePort(host) : (opts.port as number);
    try {
      return await launch(binary, { ...opts, host, port });
    } catch (error) {
      const portTaken = error instanceof TransportError && /address already in use/i.test(error.message);
      if (!pickPort || !portTaken || attempt >= PORT_ATTEMPTS) throw error;
    }
  }
}

/** A port nothing listens on at this moment, chosen by the OS. */
export function findFreePort(host = '127.0.0.1'): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, host, () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() =>
        port > 0 ? resolve(port) : reject(new Error(`could not read a free port on ${host}`)),
      );
    });
  });
}

type LaunchOptions = NatsServerOptions & { host: string; port: number };

async function launch(binary: string, opts: LaunchOptions): Promise<EmbeddedNats> {
  // A unique server name lets the readiness check tell our server from another one already on the port.
  const serverName = opts.serverName ?? `troupe-${randomBytes(6).toString('hex')}`;
  const args = [
    ...(opts.configFile === undefined ? [] : ['-c', opts.configFile]),
    ...['-a', opts.host, '-p', String(opts.port), '-n', serverName, '--store_dir', opts.dataDir],
  ];
  if (opts.jetstream ?? true) args.push('-js');
  if (opts.logFile !== undefined) args.push('--log', opts.logFile);
  const child = spawn(binary, args, { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  const output = collectOutput(child);
  const exited = exitOf(child);
  owned.add(child);
  void exited.then(() => owned.delete(child));

  const url = `nats://${opts.host}:${opts.port}`;
  const tail = async (): Promise<string> =>
    tailOf(opts.logFile === undefined ? output() : await readLog(opts.logFile));
  const outcome = await Promise.race([
    waitForInfo(opts.host, opts.port, serverName, opts.readyTimeoutMs ?? READY_TIMEOUT_MS),
    exited.then((exit) => exit),
  ]);
  if (outcome === 'ready' && child.pid !== undefined) {
    return {
      url,
      port: opts.port,
      pid: child.pid,
      dataDir: opts.dataDir,
      stop: () => stopProcess(child, exited),
    };
  }
  await stopProcess(child, exited);
  const why =
    outcome === 'timeout'
      ? `did not accept clients on ${url} within ${opts.readyTimeoutMs ?? READY_TIMEOUT_MS} ms`
      : outcome === 'ready'
        ? 'started without a process id'
        : `exited before accepting clients (${describeExit(outcome)})`;
  const log = await tail();
  throw new TransportError(
    'nats_server_failed',
    `nats-server (${binary} ${args.join(' ')}) ${why}.${log === '' ? '' : `\nIts last output:\n${log}`}`,
    outcome instanceof Error ? { cause: outcome } : undefined,
  );
}

type Exit = { code: number | null; signal: NodeJS.Signals | null } | Error;

function exitOf(child: ChildProcess): Promise<Exit> {
  return new Promise((resolve) => {
    child.once('error', (error) => resolve(error));
    child.once('exit', (code, signal) => resolve({ code, signal }));
  });
}

function describeExit(exit: Exit): string {
  if (exit instanceof Error) return exit.message;
  return exit.signal === null ? `exit code ${exit.code}` : `signal ${exit.signal}`;
}

async function stopProcess(child: ChildProcess, exited: Promise<Exit>): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return;
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), KILL_AFTER_MS);
  try {
    await exited;
  } finally {
    clearTimeout(timer);
  }
}

/** Polls until the server named `serverName` greets a TCP client with its INFO line. */
async function waitForInfo(
  host: string,
  port: number,
  serverName: string,
  timeoutMs: number,
): Promise<'ready' | 'timeout'> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const info = await readInfo(host, port, Math.max(1, Math.min(1_000, deadline - Date.now())));
    if (info?.server_name === serverName) return 'ready';
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
  return 'timeout';
}

/** Connects, reads the server's `INFO {…}` line and hangs up; undefined when there is no NATS server there. */
function readInfo(
  host: string,
  port: number,
  timeoutMs: number,
): Promise<{ server_name?: string } | undefined> {
  return new Promise((resolve) => {
    const socket = createConnection({ host, port });
    let received = '';
    const finish = (info: { server_name?: string } | undefined): void => {
      socket.destroy();
      resolve(info);
    };
    socket.setTimeout(timeoutMs, () => finish(undefined));
    socket.once('error', () => finish(undefined));
    socket.on('data', (chunk: Buffer) => {
      received += chunk.toString('utf8');
      const end = received.indexOf('\r\n');
      if (end === -1) return;
      const line = received.slice(0, end);
      finish(line.startsWith('INFO ') ? parseInfo(line.slice(5)) : undefined);
    });
  });
}

function parseInfo(json: string): { server_name?: string } | undefined {
  try {
    const info: unknown = JSON.parse(json);
    return typeof info === 'object' && info !== null ? (info as { server_name?: string }) : undefined;
  } catch {
    return undefined;
  }
}

function collectOutput(child: ChildProcess): () => string {
  let text = '';
  const keep = (chunk: Buffer): void => {
    text = (text + chunk.toString('utf8')).slice(-STDERR_KEEP);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  return () => text;
}

async function readLog(path: string): Promise<string> {
  try {
    return (await readFile(path, 'utf8')).slice(-STDERR_KEEP);
  } catch {
    return '';
  }
}

function tailOf(text: string): string {
  return text.trimEnd().split('\n').slice(-TAIL_LINES).join('\n');
}

function missingServerError(tried: string | undefined): TransportError {
  const fromEnv = tried !== undefined && tried === process.env.NATS_SERVER_BIN;
  const prefix =
    tried === undefined || tried === ''
      ? ''
      : `${fromEnv ? 'NATS_SERVER_BIN is set to ' : ''}${tried}, but that is not an executable file. `;
  return new TransportError('nats_server_missing', prefix + NATS_SERVER_MISSING_HELP);
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

/** Servers still running; killed if this process exits without stopping them. */
const owned = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of owned) child.kill('SIGKILL');
});
