import { stat } from 'node:fs/promises';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Tool as McpTool } from '@modelcontextprotocol/sdk/types.js';
import { errorMessage } from '@troupe/protocol';
import { z } from 'zod';
import type { Clock } from '../events/clock.ts';
import type { Logger } from '../logging/index.ts';
import type { Tool, ToolContext } from '../tools/tool.ts';
import { resolvePlaceholders } from './envPlaceholders.ts';
import {
  DEFAULT_MCP_TIMEOUT_SECONDS,
  type McpHttpServerConfig,
  type McpServerConfig,
  McpServers,
  type McpStdioServerConfig,
} from './mcpConfig.ts';
import { type McpCallOptions, McpServerConnection, type OpenedTransport } from './mcpServerConnection.ts';
import { McpServerError, reasonOf } from './mcpServerError.ts';
import { renderMcpToolResult } from './mcpToolResult.ts';
import { DEFAULT_RESTART_BACKOFF, type RestartBackoff } from './restartBackoff.ts';
import { StdioProcessTransport } from './stdioProcessTransport.ts';

export interface McpConnectOptions {
  logger?: Logger;
  /** The coordinator's environment: `${VAR}` placeholders resolve from it, and stdio servers get its PATH, HOME and LANG. `process.env` by default. */
  env?: Readonly<Record<string, string | undefined>>;
  /** The waits before restarting a stdio server that died or reconnecting to an HTTP one; 1 s doubling to 30 s by default. */
  restartBackoff?: Partial<RestartBackoff>;
  /** Time and timers for those waits; the system's by default. */
  clock?: Clock;
}

/** One connected server and the Troupe names of the tools it exposes. */
export interface McpServerInfo {
  name: string;
  transport: McpServerConfig['transport'];
  /** Troupe tool names, `<server>.<tool>`, in the server's order. */
  tools: string[];
  /** The process id of a stdio server's child: the current one, after a restart. */
  readonly pid: number | undefined;
}

/** The tools of every connected MCP server, ready for a `ToolRegistry`. */
export interface McpConnections {
  tools: Tool[];
  servers: McpServerInfo[];
  /** Disconnects every server and ends stdio servers' processes; safe to call more than once. */
  close(): Promise<void>;
}

// What a stdio server inherits from the coordinator; everything else it needs must be configured.
const INHERITED_ENV = ['PATH', 'HOME', 'LANG'] as const;
// The registry's rule for the part after the dot.
const validToolName = /^[A-Za-z0-9_-]{1,64}$/;

interface Connected {
  info: McpServerInfo;
  tools: Tool[];
  close(): Promise<void>;
}

/**
 * Connects every MCP server in parallel, lists its tools, and wraps each as a Troupe tool named `<server>.<tool>`.
 * If any server fails to start, the others are closed again and the error names each failure. Later, a stdio
 * server that dies is restarted and an HTTP server whose session ends is reconnected, after a backoff
 * (`McpServerConnection`); `close()` ends all of it.
 *
 * @example
 * const mcp = await connectMcpServers({ files: { transport: 'stdio', command: 'npx', args: ['mcp-files'] } }, { logger });
 * for (const tool of mcp.tools) registry.register(tool);
 * // … later
 * await mcp.close();
 */
export async function connectMcpServers(
  servers: McpServers,
  opts: McpConnectOptions = {},
): Promise<McpConnections> {
  const parsed = McpServers.safeParse(servers);
  if (!parsed.success) {
    const issues = parsed.error.issues.map(
      (issue) => `- ${issue.path.map(String).join('.')}: ${issue.message}`,
    );
    throw new McpServerError('invalid_config', `invalid MCP server config:\n${issues.join('\n')}`, {
      cause: parsed.error,
    });
  }
  const env = opts.env ?? process.env;
  const settled = await Promise.allSettled(
    Object.entries(parsed.data).map(([name, config]) => connectServer(name, config, env, opts)),
  );
  const connected = settled.flatMap((outcome) => (outcome.status === 'fulfilled' ? [outcome.value] : []));
  const failures = settled.flatMap((outcome) => (outcome.status === 'rejected' ? [outcome.reason] : []));
  if (failures.length > 0) {
    await Promise.allSettled(connected.map((server) => server.close()));
    throw combinedFailure(failures);
  }
  let closing: Promise<void> | undefined;
  return {
    tools: connected.flatMap((server) => server.tools),
    servers: connected.map((server) => server.info),
    close() {
      closing ??= Promise.allSettled(connected.map((server) => server.close())).then(() => undefined);
      return closing;
    },
  };
}

async function connectServer(
  name: string,
  config: McpServerConfig,
  env: Readonly<Record<string, string | undefined>>,
  opts: McpConnectOptions,
): Promise<Connected> {
  const logger = opts.logger;
  const timeoutMs = (config.timeout ?? DEFAULT_MCP_TIMEOUT_SECONDS) * 1000;
  const endpoint = describeEndpoint(config);
  const open =
    config.transport === 'stdio' ? stdioOpener(name, config, env, logger) : httpOpener(name, config, env);
  const connection = await McpServerConnection.connect({
    name,
    transport: config.transport,
    endpoint,
    timeoutMs,
    open,
    backoff: { ...DEFAULT_RESTART_BACKOFF, ...opts.restartBackoff },
    ...(logger ? { logger } : {}),
    ...(opts.clock ? { clock: opts.clock } : {}),
  });
  const tools = exposedTools(name, config, connection.listed, logger).map((tool) =>
    wrapTool(connection, tool, timeoutMs, logger),
  );
  const info: McpServerInfo = {
    name,
    transport: config.transport,
    tools: tools.map((tool) => tool.name),
    get pid() {
      return connection.pid;
    },
  };
  logger?.info({ mcpServer: name, endpoint, tools: info.tools }, 'MCP server connected');
  return { info, tools, close: () => connection.close() };
}

/** Resolves the env placeholders once; each (re)start checks the cwd and gets a fresh child transport. */
function stdioOpener(
  name: string,
  config: McpStdioServerConfig,
  env: Readonly<Record<string, string | undefined>>,
  logger: Logger | undefined,
): () => Promise<OpenedTransport> {
  const configured = resolvePlaceholders(config.env ?? {}, env, { server: name, what: 'env' });
  const cwd = config.cwd;
  return async () => {
    if (cwd !== undefined && !(await isDirectory(cwd))) {
      throw new McpServerError(
        'start_failed',
        `MCP server ${name} (${describeEndpoint(config)}) failed to start: cwd ${cwd} is not a directory`,
        { server: name },
      );
    }
    const transport = new StdioProcessTransport({
      command: config.command,
      args: config.args ?? [],
      env: { ...inheritedEnv(env), ...configured },
      ...(cwd === undefined ? {} : { cwd }),
      onStderrLine: (line) => logger?.debug({ mcpServer: name, stderr: line }, 'MCP server stderr'),
    });
    return {
      transport,
      pid: () => transport.pid,
      exit: () => transport.exit,
      stderr: () => transport.stderrTail,
    };
  };
}

function httpOpener(
  name: string,
  config: McpHttpServerConfig,
  env: Readonly<Record<string, string | undefined>>,
): () => Promise<OpenedTransport> {
  const headers = resolvePlaceholders(config.headers ?? {}, env, { server: name, what: 'header' });
  return async () => {
    const transport = new StreamableHTTPClientTransport(new URL(config.url), { requestInit: { headers } });
    return { transport, terminate: () => transport.terminateSession() };
  };
}

function exposedTools(
  server: string,
  config: McpServerConfig,
  listed: readonly McpTool[],
  logger: Logger | undefined,
): McpTool[] {
  const allow = config.tools === undefined ? undefined : new Set(config.tools);
  if (config.tools !== undefined) {
    const missing = config.tools.filter((name) => !listed.some((tool) => tool.name === name));
    if (missing.length > 0) {
      logger?.warn({ mcpServer: server, missing }, 'MCP server does not offer every tool its config lists');
    }
  }
  return listed.filter((tool) => {
    if (allow !== undefined && !allow.has(tool.name)) return false;
    if (validToolName.test(tool.name)) return true;
    logger?.warn(
      { mcpServer: server, tool: tool.name },
      `MCP tool name does not match ${validToolName.source}, which models require; tool skipped`,
    );
    return false;
  });
}

function wrapTool(
  connection: McpServerConnection,
  tool: McpTool,
  timeoutMs: number,
  logger: Logger | undefined,
): Tool {
  const server = connection.name;
  const name = `${server}.${tool.name}`;
  return {
    name,
    description: tool.description ?? tool.title ?? `${tool.name}, a tool of MCP server ${server}`,
    input: inputSchemaOf(name, tool.inputSchema, logger),
    timeoutMs,
    // The server's own word that a call may be repeated (MCP tool annotations).
    rerunnable: tool.annotations?.readOnlyHint === true || tool.annotations?.idempotentHint === true,
    // Only the server's readOnlyHint: an idempotent tool may still change the world (set a status, put a file).
    readOnly: tool.annotations?.readOnlyHint === true,
    async run(input, ctx) {
      const args = input as Record<string, unknown>;
      const result = await connection.callTool(name, tool.name, args, callOptions(ctx, timeoutMs));
      return renderMcpToolResult(name, result);
    },
  };
}

// A progress token is asked for only where someone listens to progress.
function callOptions(ctx: ToolContext, timeoutMs: number): McpCallOptions {
  const progress = ctx.progress;
  if (!progress) return { signal: ctx.signal, timeoutMs };
  return {
    signal: ctx.signal,
    timeoutMs,
    onprogress: ({ progress: done, total, message }) =>
      progress({
        progress: done,
        ...(total === undefined ? {} : { total }),
        ...(message === undefined ? {} : { message }),
      }),
  };
}

// The registry shows the model this schema's JSON form, so one without a JSON form is as bad as none.
function inputSchemaOf(
  toolName: string,
  schema: McpTool['inputSchema'],
  logger: Logger | undefined,
): z.ZodType {
  try {
    const converted = z.fromJSONSchema(schema as z.core.JSONSchema.JSONSchema);
    const json = z.toJSONSchema(converted, { target: 'draft-07', io: 'input' });
    if (json.type !== 'object') throw new Error(`it converts to type ${String(json.type)}, not object`);
    return converted;
  } catch (error) {
    logger?.warn(
      { tool: toolName, reason: reasonOf(error) },
      'MCP tool input schema could not be converted; accepting any JSON object',
    );
    return z.record(z.string(), z.unknown());
  }
}

function combinedFailure(failures: readonly unknown[]): unknown {
  if (failures.length === 1) return failures[0];
  const lines = failures.map((failure) => `- ${errorMessage(failure)}`);
  return new McpServerError(
    'start_failed',
    `${failures.length} MCP servers failed to start:\n${lines.join('\n')}`,
    {
      cause: new AggregateError(failures),
    },
  );
}

function inheritedEnv(env: Readonly<Record<string, string | undefined>>): Record<string, string> {
  const inherited: Record<string, string> = {};
  for (const key of INHERITED_ENV) {
    const value = env[key];
    if (value !== undefined) inherited[key] = value;
  }
  return inherited;
}

/** `stdio: node server.js` or `http: https://host/path`; an URL's credentials and query are left out, as they may hold secrets. */
function describeEndpoint(config: McpServerConfig): string {
  if (config.transport === 'http') {
    const url = new URL(config.url);
    return `http: ${url.origin}${url.pathname}`;
  }
  const words = [config.command, ...(config.args ?? [])].map((word) =>
    /[\s"']/.test(word) ? JSON.stringify(word) : word,
  );
  return `stdio: ${words.join(' ')}`;
}

async function isDirectory(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isDirectory();
  } catch {
    return false;
  }
}
