import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import {
  type CallToolResult,
  ErrorCode,
  McpError,
  type Tool as McpTool,
  type Progress,
} from '@modelcontextprotocol/sdk/types.js';
import { type Clock, systemClock } from '../events/clock.ts';
import type { Logger } from '../logging/index.ts';
import { ToolError } from '../tools/toolError.ts';
import { withTimeout } from '../withTimeout.ts';
import { McpServerError, reasonOf } from './mcpServerError.ts';
import { DEFAULT_RESTART_BACKOFF, type RestartBackoff, restartDelayMs } from './restartBackoff.ts';

/** A transport made for one connection attempt, and what it can tell of the process behind it. */
export interface OpenedTransport {
  transport: Transport;
  /** The child's process id (stdio). */
  pid?(): number | undefined;
  /** How the child ended, once it has: `exited with code 1`, `killed by SIGKILL` (stdio). */
  exit?(): string | undefined;
  /** The last lines the child wrote to stderr (stdio). */
  stderr?(): string;
  /** Ends the session on the server before the client closes (HTTP). */
  terminate?(): Promise<void>;
}

/** What one server's connection needs: who it is, how to open a fresh transport to it, and how to wait. */
export interface McpServerConnectionOptions {
  name: string;
  transport: 'stdio' | 'http';
  /** How messages show the server: `stdio: node x.js`, `http: https://host/mcp`. */
  endpoint: string;
  /** For the handshake, for listing the tools and for each call. */
  timeoutMs: number;
  /** Makes a new, unstarted transport; called for the first connection and for each restart. */
  open(): Promise<OpenedTransport>;
  logger?: Logger;
  backoff?: RestartBackoff;
  clock?: Clock;
}

/** How a call is made: the executor's signal and timeout, and where progress notifications go. */
export interface McpCallOptions {
  signal: AbortSignal;
  timeoutMs: number;
  onprogress?: (progress: Progress) => void;
}

interface Established {
  client: Client;
  opened: OpenedTransport;
  listed: McpTool[];
}

interface Up {
  kind: 'up';
  client: Client;
  opened: OpenedTransport;
  since: number;
  /** The server's tool names on this connection. */
  offered: ReadonlySet<string>;
}

interface Down {
  kind: 'down';
  /** What happened last, and when: `its process exited with code 1 at 12:00:01 UTC`. */
  what: string;
  /** The stderr of the process that went away (stdio). */
  stderr: string;
  /** When the next attempt may start; undefined while one is under way. */
  nextTryAt: number | undefined;
  timer: unknown;
}

type State = Up | Down | { kind: 'closed' };

const CLIENT_INFO = { name: 'troupe', version: '0.1.0' };
const STDERR_LINES_IN_ERRORS = 5;
const noop = () => undefined;

/**
 * One MCP server's connection for the life of the process. A stdio server that dies is restarted after a
 * backoff (1 s, 2 s, 4 s … 30 s by default) and its tools are listed again; an HTTP server whose session ends is
 * reconnected on the next call, with the same backoff between failed attempts. While a server is down, its calls
 * fail at once with a `ToolError` that says what happened and when the next attempt is. `close()` ends it all.
 *
 * @example
 * const files = await McpServerConnection.connect({ name: 'files', transport: 'stdio', endpoint, timeoutMs, open });
 * const result = await files.callTool('files.read', 'read', { path: 'a.txt' }, { signal, timeoutMs });
 * await files.close();
 */
export class McpServerConnection {
  readonly name: string;
  readonly transport: 'stdio' | 'http';
  readonly endpoint: string;
  /** The server's tools as listed on the first connection; the ones a process exposes. */
  readonly listed: readonly McpTool[];

  readonly #options: McpServerConnectionOptions;
  readonly #backoff: RestartBackoff;
  readonly #clock: Clock;
  #state: State;
  /** Attempts since the server was last stable; the next one is number `#attempts + 1`. */
  #attempts = 0;
  /** The connection an attempt is building, so `close()` can end it too. */
  #pending: { client: Client; opened: OpenedTransport } | undefined;
  #attempting: Promise<void> | undefined;
  #closing: Promise<void> | undefined;

  /** Connects and lists the tools; throws `McpServerError` (`start_failed`) naming the server and the reason. */
  static async connect(options: McpServerConnectionOptions): Promise<McpServerConnection> {
    let opened: OpenedTransport | undefined;
    let connection: McpServerConnection | undefined;
    try {
      const established = await establish(
        options,
        (client) => {
          if (connection) connection.#lost(client);
        },
        (attempt) => {
          opened = attempt.opened;
          return true;
        },
      );
      connection = new McpServerConnection(options, established);
      return connection;
    } catch (cause) {
      if (cause instanceof McpServerError) throw cause;
      throw new McpServerError(
        'start_failed',
        `MCP server ${options.name} (${options.endpoint}) failed to start: ${reasonOf(cause)}${startDetail(opened)}`,
        { server: options.name, cause },
      );
    }
  }

  private constructor(options: McpServerConnectionOptions, first: Established) {
    this.#options = options;
    this.name = options.name;
    this.transport = options.transport;
    this.endpoint = options.endpoint;
    this.listed = first.listed;
    this.#backoff = options.backoff ?? DEFAULT_RESTART_BACKOFF;
    this.#clock = options.clock ?? systemClock;
    this.#state = this.#up(first);
  }

  /** The process id of the server's current child (stdio), or of the one a restart is starting. */
  get pid(): number | undefined {
    const state = this.#state;
    if (state.kind === 'up') return state.opened.pid?.();
    return this.#pending?.opened.pid?.();
  }

  /**
   * Calls one of the server's tools. Throws `ToolError`: `timeout`, `invalid_arguments` (the server refused the
   * arguments), or `failed` with a message that names the server and says what went wrong and what happens next.
   */
  async callTool(
    toolName: string,
    serverTool: string,
    args: Record<string, unknown>,
    options: McpCallOptions,
  ): Promise<CallToolResult> {
    const up = await this.#ready(toolName);
    try {
      return await this.#send(up, toolName, serverTool, args, options);
    } catch (error) {
      if (!(this.transport === 'http' && this.#state === up && sessionLost(error))) {
        throw this.#failure(toolName, error, options, up);
      }
      // The server no longer knows the session (it restarted): the call never ran there, so it is safe to make
      // again on a new session.
      this.#goDown(up, 'its session ended (the server answered HTTP 404 for it)');
      const again = await this.#ready(toolName);
      try {
        return await this.#send(again, toolName, serverTool, args, options);
      } catch (retryError) {
        throw this.#failure(toolName, retryError, options, again);
      }
    }
  }

  /** Disconnects, ends a stdio server's process and stops any restart; safe to call more than once. */
  close(): Promise<void> {
    if (this.#closing) return this.#closing;
    const state = this.#state;
    const pending = this.#pending;
    this.#state = { kind: 'closed' };
    this.#pending = undefined;
    if (state.kind === 'down' && state.timer !== undefined) this.#clock.clearTimeout(state.timer);
    const ends: Promise<unknown>[] = [];
    if (pending) ends.push(pending.client.close());
    if (state.kind === 'up') ends.push(closeUp(state));
    this.#closing = Promise.allSettled(ends)
      .then(() => this.#attempting)
      .then(noop, noop);
    return this.#closing;
  }

  async #send(
    up: Up,
    toolName: string,
    serverTool: string,
    args: Record<string, unknown>,
    options: McpCallOptions,
  ): Promise<CallToolResult> {
    if (!up.offered.has(serverTool)) throw this.#vanished(toolName, serverTool, up);
    const result = await up.client.callTool({ name: serverTool, arguments: args }, undefined, {
      signal: options.signal,
      timeout: options.timeoutMs,
      ...(options.onprogress ? { onprogress: options.onprogress } : {}),
    });
    return result as CallToolResult;
  }

  /** The connection to call on, reconnecting an HTTP server whose backoff is over; else a `ToolError` saying why not. */
  async #ready(toolName: string): Promise<Up> {
    let state = this.#state;
    // A child that exited before its pipes closed: do not wait for the close to notice.
    const exit = state.kind === 'up' ? state.opened.exit?.() : undefined;
    if (state.kind === 'up' && exit !== undefined) {
      this.#goDown(state, processEnded(exit));
      state = this.#state;
    }
    if (state.kind === 'up') return state;
    if (state.kind === 'down' && this.transport === 'http') {
      const due = state.nextTryAt !== undefined && this.#clock.now() >= state.nextTryAt;
      if (this.#attempting) await this.#attempting;
      else if (due) await this.#attemptNow();
      if (this.#state.kind === 'up') return this.#state;
    }
    throw new ToolError('failed', `${toolName} failed: ${this.#unavailable('is down')}`);
  }

  #up(established: Established): Up {
    return {
      kind: 'up',
      client: established.client,
      opened: established.opened,
      since: this.#clock.now(),
      offered: new Set(established.listed.map((tool) => tool.name)),
    };
  }

  /** The client's transport closed: the server went away, unless this connection was already replaced or closed. */
  #lost(client: Client): void {
    const state = this.#state;
    if (state.kind !== 'up' || state.client !== client) return;
    const exit = state.opened.exit?.();
    this.#goDown(
      state,
      exit !== undefined
        ? processEnded(exit)
        : this.transport === 'stdio'
          ? 'its process closed its output'
          : 'the client closed its connection',
    );
  }

  #goDown(up: Up, what: string): void {
    const now = this.#clock.now();
    if (now - up.since >= this.#backoff.stableAfterMs) this.#attempts = 0;
    const waitMs = this.#waitBefore(this.#attempts + 1);
    const stderr = up.opened.stderr?.() ?? '';
    this.#state = {
      kind: 'down',
      what: `${what} at ${clockTime(now)}`,
      stderr,
      nextTryAt: now + waitMs,
      timer: undefined,
    };
    this.#options.logger?.warn(
      {
        mcpServer: this.name,
        endpoint: this.endpoint,
        reason: what,
        ...(stderr.trim() === '' ? {} : { stderr: lastLines(stderr) }),
        attempt: this.#attempts + 1,
        retryInMs: waitMs,
      },
      this.transport === 'stdio'
        ? 'MCP server disconnected; restarting it'
        : 'MCP server disconnected; reconnecting on the next call',
    );
    // What is left of the old connection goes: a dead child's pipes, a session the server forgot.
    void up.client.close().catch(noop);
    this.#schedule(waitMs);
  }

  /** Starts the next attempt of a stdio server after `waitMs`; HTTP servers wait for their next call instead. */
  #schedule(waitMs: number): void {
    const down = this.#state;
    if (this.transport !== 'stdio' || down.kind !== 'down') return;
    down.timer = this.#clock.setTimeout(() => {
      down.timer = undefined;
      void this.#attemptNow();
    }, waitMs);
  }

  // Stdio servers wait before each attempt; an HTTP server is tried again at once, then after each failure.
  #waitBefore(attempt: number): number {
    if (this.transport === 'stdio') return restartDelayMs(attempt, this.#backoff);
    return attempt === 1 ? 0 : restartDelayMs(attempt - 1, this.#backoff);
  }

  #attemptNow(): Promise<void> {
    this.#attempting ??= this.#attempt().finally(() => {
      this.#attempting = undefined;
    });
    return this.#attempting;
  }

  async #attempt(): Promise<void> {
    const down = this.#state;
    if (down.kind !== 'down') return;
    this.#attempts += 1;
    const attempt = this.#attempts;
    down.nextTryAt = undefined;
    const logger = this.#options.logger;
    const verb = this.transport === 'stdio' ? 'restart' : 'reconnection';
    logger?.warn(
      { mcpServer: this.name, endpoint: this.endpoint, attempt },
      this.transport === 'stdio' ? 'restarting MCP server' : 'reconnecting to MCP server',
    );
    let opened: OpenedTransport | undefined;
    try {
      const established = await establish(
        this.#options,
        (client) => this.#lost(client),
        (pending) => {
          opened = pending.opened;
          if (this.#state.kind === 'closed') return false;
          this.#pending = pending;
          return true;
        },
      );
      this.#pending = undefined;
      if (this.#state.kind === 'closed') {
        await established.client.close().catch(noop);
        return;
      }
      this.#restarted(established, attempt);
    } catch (cause) {
      this.#pending = undefined;
      if (this.#state.kind === 'closed') return;
      const now = this.#clock.now();
      const exit = opened?.exit?.();
      const reason = httpFailure(cause) ?? reasonOf(cause);
      const what =
        exit === undefined
          ? `${verb} attempt ${attempt} failed at ${clockTime(now)}: ${reason}`
          : `${processEnded(exit)} at ${clockTime(now)}, during ${verb} attempt ${attempt}`;
      const waitMs = this.#waitBefore(attempt + 1);
      const stderr = opened?.stderr?.() ?? '';
      this.#state = { kind: 'down', what, stderr, nextTryAt: now + waitMs, timer: undefined };
      logger?.warn(
        {
          mcpServer: this.name,
          endpoint: this.endpoint,
          attempt,
          reason,
          ...(exit === undefined ? {} : { exit }),
          ...(stderr.trim() === '' ? {} : { stderr: lastLines(stderr) }),
          retryInMs: waitMs,
        },
        `MCP server ${verb} failed; trying again later`,
      );
      this.#schedule(waitMs);
    }
  }

  #restarted(established: Established, attempt: number): void {
    const up = this.#up(established);
    this.#state = up;
    const logger = this.#options.logger;
    const exposed = this.listed.map((tool) => tool.name);
    const vanished = exposed.filter((name) => !up.offered.has(name));
    const added = [...up.offered].filter((name) => !exposed.includes(name));
    const pid = up.opened.pid?.();
    logger?.warn(
      { mcpServer: this.name, endpoint: this.endpoint, attempt, ...(pid === undefined ? {} : { pid }) },
      this.transport === 'stdio' ? 'MCP server restarted' : 'MCP server reconnected',
    );
    if (vanished.length > 0) {
      logger?.warn(
        { mcpServer: this.name, vanished },
        'MCP server no longer offers some tools; their calls fail',
      );
    }
    if (added.length > 0) {
      logger?.info(
        { mcpServer: this.name, added },
        'MCP server offers new tools; they are not used before this process restarts',
      );
    }
    // It may have died again while its tools were being listed.
    const exit = up.opened.exit?.();
    if (exit !== undefined) this.#goDown(up, processEnded(exit));
  }

  #failure(toolName: string, error: unknown, options: McpCallOptions, up: Up): ToolError {
    // The executor aborts with the ToolError that says why (timeout, cancellation).
    if (options.signal.aborted && options.signal.reason instanceof ToolError) return options.signal.reason;
    if (error instanceof ToolError) return error;
    if (error instanceof McpError && error.code === ErrorCode.RequestTimeout) {
      return new ToolError('timeout', `${toolName} timed out after ${options.timeoutMs} ms`, {
        cause: error,
      });
    }
    if (error instanceof McpError && error.code === ErrorCode.InvalidParams) {
      return new ToolError('invalid_arguments', `${toolName} refused its arguments: ${error.message}`, {
        cause: error,
      });
    }
    const exit = up.opened.exit?.();
    if (this.#state === up && exit !== undefined) this.#goDown(up, processEnded(exit));
    if (this.#state !== up && connectionLost(error, up)) {
      return new ToolError('failed', `${toolName} failed: ${this.#unavailable('died mid-call')}`, {
        cause: error,
      });
    }
    if (connectionLost(error, up)) {
      return new ToolError('failed', `${toolName} failed: ${this.#who()} closed the connection`, {
        cause: error,
      });
    }
    const http = this.transport === 'http' ? httpFailure(error) : undefined;
    if (http !== undefined) {
      return new ToolError('failed', `${toolName} failed: ${this.#who()} ${http}`, { cause: error });
    }
    return new ToolError('failed', `${toolName} failed: ${reasonOf(error)}`, { cause: error });
  }

  #who(): string {
    return `MCP server ${this.name} (${this.endpoint})`;
  }

  /** Why the server cannot take a call now, and what happens next. */
  #unavailable(how: 'is down' | 'died mid-call'): string {
    const state = this.#state;
    const again = this.transport === 'stdio' ? 'restarted' : 'reconnected';
    if (state.kind === 'closed') {
      return `${this.#who()} is closed: its connections were closed as this process stops; it will not be ${again}`;
    }
    if (state.kind === 'up')
      return `${this.#who()} ${how}; it has been ${again} since, so the call may be made again`;
    const stderr = state.stderr.trim() === '' ? '' : `; stderr: ${lastLines(state.stderr)}`;
    const said = how === 'is down' ? (this.transport === 'stdio' ? 'is gone' : 'is unavailable') : how;
    return `${this.#who()} ${said}: ${state.what}; ${this.#plan(state)}${stderr}`;
  }

  #plan(down: Down): string {
    if (down.nextTryAt === undefined) {
      const doing = this.transport === 'stdio' ? 'restarting it' : 'reconnecting';
      return `${doing} (attempt ${this.#attempts} under way)`;
    }
    const attempt = this.#attempts + 1;
    const waitMs = down.nextTryAt - this.#clock.now();
    if (this.transport === 'stdio')
      return `restarting it (attempt ${attempt}, next try in ${duration(waitMs)})`;
    return waitMs <= 0
      ? `reconnecting on the next call (attempt ${attempt})`
      : `reconnecting on the first call after ${duration(waitMs)} (attempt ${attempt})`;
  }

  /** A tool a restarted server no longer offers (the first connection offers every tool that is called). */
  #vanished(toolName: string, serverTool: string, up: Up): ToolError {
    const again = this.transport === 'stdio' ? 'restarted' : 'reconnected';
    const offered = [...up.offered].join(', ') || 'nothing';
    return new ToolError(
      'failed',
      `${toolName} failed: ${this.#who()} no longer offers tool ${serverTool} since it was ${again} at ${clockTime(up.since)}; it offers: ${offered}`,
    );
  }
}

/**
 * Opens a transport, connects a client over it and lists the server's tools (all pages). `hold` sees the attempt
 * before it starts and may refuse it (the connection was closed meanwhile); a failure closes what was opened.
 */
async function establish(
  options: McpServerConnectionOptions,
  onClose: (client: Client) => void,
  hold: (pending: { client: Client; opened: OpenedTransport }) => boolean,
): Promise<Established> {
  const opened = await options.open();
  const client = new Client(CLIENT_INFO);
  client.onclose = () => onClose(client);
  client.onerror = (error) =>
    options.logger?.debug({ mcpServer: options.name, err: error }, 'MCP transport error');
  if (!hold({ client, opened })) throw new Error(`MCP server ${options.name} was closed`);
  try {
    await client.connect(opened.transport, { timeout: options.timeoutMs });
    const listed = await listAllTools(client, options.timeoutMs);
    return { client, opened, listed };
  } catch (cause) {
    await client.close().catch(noop);
    throw cause;
  }
}

async function listAllTools(client: Client, timeoutMs: number): Promise<McpTool[]> {
  const tools: McpTool[] = [];
  let cursor: string | undefined;
  do {
    const page = await client.listTools(cursor === undefined ? {} : { cursor }, { timeout: timeoutMs });
    tools.push(...page.tools);
    cursor = page.nextCursor;
  } while (cursor !== undefined);
  return tools;
}

async function closeUp(up: Up): Promise<void> {
  if (up.opened.terminate) await withTimeout(up.opened.terminate(), 2000).catch(noop);
  await up.client.close();
}

/** What to add to a start failure's message: how the process ended, what it said on stderr. */
function startDetail(opened: OpenedTransport | undefined): string {
  const exit = opened?.exit?.();
  const stderr = opened?.stderr?.().trim() ?? '';
  const ended = exit === undefined ? '' : `; the process ${exit}`;
  return stderr === '' ? ended : `${ended}; stderr: ${stderr}`;
}

function processEnded(exit: string): string {
  return exit.startsWith('killed') ? `its process was ${exit}` : `its process ${exit}`;
}

// The transport reports a closed connection in several ways, depending on when the call noticed.
function connectionLost(error: unknown, up: Up): boolean {
  if (error instanceof McpError && error.code === ErrorCode.ConnectionClosed) return true;
  if (error instanceof Error && error.message === 'Not connected') return true;
  return up.opened.exit?.() !== undefined;
}

function sessionLost(error: unknown): boolean {
  return error instanceof StreamableHTTPError && error.code === 404;
}

const NETWORK_REASONS: Readonly<Record<string, string>> = {
  ECONNREFUSED: 'connection refused',
  ECONNRESET: 'connection reset',
  ENOTFOUND: 'host not found',
  EAI_AGAIN: 'host name lookup failed',
  ETIMEDOUT: 'connection timed out',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  UND_ERR_CONNECT_TIMEOUT: 'connection timed out',
  UND_ERR_SOCKET: 'connection closed by the server',
};

/** `answered HTTP 502: …` or `could not be reached: connection refused`, for what went wrong over HTTP. */
function httpFailure(error: unknown): string | undefined {
  if (error instanceof StreamableHTTPError) {
    const text = error.message.replace(/^Streamable HTTP error: (Error POSTing to endpoint: )?/, '').trim();
    const status = error.code === undefined || error.code < 0 ? 'an unexpected answer' : `HTTP ${error.code}`;
    return `answered ${status}${text === '' ? '' : `: ${cut(text, 300)}`}`;
  }
  const code = networkCode(error);
  if (code === undefined) return undefined;
  return `could not be reached: ${NETWORK_REASONS[code] ?? code} (${reasonOf(error)})`;
}

function networkCode(error: unknown, depth = 0): string | undefined {
  if (!(error instanceof Error) || depth > 5) return undefined;
  const code = (error as NodeJS.ErrnoException).code;
  if (typeof code === 'string' && code in NETWORK_REASONS) return code;
  const inner = error instanceof AggregateError ? error.errors : [];
  for (const candidate of [error.cause, ...inner]) {
    const found = networkCode(candidate, depth + 1);
    if (found !== undefined) return found;
  }
  return undefined;
}

/** `12:00:01 UTC`, as `troupe tail` shows times. */
function clockTime(ms: number): string {
  return `${new Date(ms).toISOString().slice(11, 19)} UTC`;
}

function duration(ms: number): string {
  const rounded = Math.max(0, Math.round(ms));
  return rounded < 1000 ? `${rounded} ms` : `${Math.round(rounded / 1000)} s`;
}

function lastLines(text: string): string {
  return text.trim().split('\n').slice(-STDERR_LINES_IN_ERRORS).join('\n');
}

function cut(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max)}…`;
}
