import { stat } from 'node:fs/promises';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  type CallToolResult,
  ErrorCode,
  McpError,
  type Tool as McpTool,
} from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import type { Logger } from '../logging/index.ts';
import type { Tool } from '../tools/tool.ts';
import { ToolError } from '../tools/toolError.ts';
import { resolvePlaceholders } from './envPlaceholders.ts';
import {
  DEFAULT_MCP_TIMEOUT_SECONDS,
  type McpHttpServerConfig,
  type McpServerConfig,
  McpServers,
  type McpStdioServerConfig,
} from './mcpConfig.ts';
import { McpServerError } from './mcpServerError.ts';
import { renderMcpToolResult } from './mcpToolResult.ts';
import { StdioProcessTransport } from './stdioProcessTransport.ts';

export interface McpConnectOptions {
  logger?: Logger;
  /** The coordinator's environment: `${VAR}` placeholders resolve from it, and stdio servers get its PATH, HOME and LANG. `process.env` by default. */
  env?: Readonly<Record<string, string | undefined>>;
}

/** One connected server and the Troupe names of the tools it exposes. */
export interface McpServerInfo {
  name: string;
  transport: McpServerConfig['transport'];
  /** Troupe tool names, `<server>.<tool>`, in the server's order. */
  tools: string[];
  /** The child's process id, for a stdio server. */
  pid?: number;
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
const CLIENT_INFO = { name: 'troupe', version: '0.1.0' };

interface Connected {
  info: McpServerInfo;
  tools: Tool[];
  close(): Promise<void>;
}

interface Opened {
  transport: StdioProcessTransport | StreamableHTTPClientTransport;
  /** What to add to a start failure's message: how a process ended, what it said on stderr. */
  detail(): string;
  pid(): number | undefined;
}

/**
 * Connects every MCP server in parallel, lists its tools once, and wraps each as a Troupe tool named
 * `<server>.<tool>`. If any server fails to start, the others are closed again and the error names each failure.
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
    Object.entries(parsed.data).map(([name, config]) => connectServer(name, config, env, opts.logger)),
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
  logger: Logger | undefined,
): Promise<Connected> {
  const timeoutMs = (config.timeout ?? DEFAULT_MCP_TIMEOUT_SECONDS) * 1000;
  const endpoint = describeEndpoint(config);
  const opened =
    config.transport === 'stdio' ? await openStdio(name, config, env, logger) : openHttp(name, config, env);
  const client = new Client(CLIENT_INFO);
  let listed: McpTool[];
  try {
    await client.connect(opened.transport, { timeout: timeoutMs });
    listed = await listAllTools(client, timeoutMs);
  } catch (cause) {
    await client.close().catch(() => undefined);
    throw new McpServerError(
      'start_failed',
      `MCP server ${name} (${endpoint}) failed to start: ${reasonOf(cause)}${opened.detail()}`,
      { server: name, cause },
    );
  }
  let closing = false;
  client.onclose = () => {
    if (closing) return;
    const detail = opened.detail().replace(/^; /, '');
    logger?.warn(
      { mcpServer: name, endpoint, ...(detail === '' ? {} : { detail }) },
      'MCP server disconnected; its tools will fail',
    );
  };
  client.onerror = (error) => logger?.debug({ mcpServer: name, err: error }, 'MCP transport error');

  const tools = exposedTools(name, config, listed, logger).map((tool) =>
    wrapTool(name, tool, client, timeoutMs, logger),
  );
  const pid = opened.pid();
  const info: McpServerInfo = {
    name,
    transport: config.transport,
    tools: tools.map((tool) => tool.name),
    ...(pid === undefined ? {} : { pid }),
  };
  logger?.info({ mcpServer: name, endpoint, tools: info.tools }, 'MCP server connected');
  return {
    info,
    tools,
    async close() {
      closing = true;
      if (opened.transport instanceof StreamableHTTPClientTransport) {
        await withinMs(opened.transport.terminateSession(), 2000).catch(() => undefined);
      }
      await client.close();
    },
  };
}

async function openStdio(
  name: string,
  config: McpStdioServerConfig,
  env: Readonly<Record<string, string | undefined>>,
  logger: Logger | undefined,
): Promise<Opened> {
  const configured = resolvePlaceholders(config.env ?? {}, env, { server: name, what: 'env' });
  if (config.cwd !== undefined && !(await isDirectory(config.cwd))) {
    throw new McpServerError(
      'start_failed',
      `MCP server ${name} (${describeEndpoint(config)}) failed to start: cwd ${config.cwd} is not a directory`,
      { server: name },
    );
  }
  const transport = new StdioProcessTransport({
    command: config.command,
    args: config.args ?? [],
    env: { ...inheritedEnv(env), ...configured },
    ...(config.cwd === undefined ? {} : { cwd: config.cwd }),
    onStderrLine: (line) => logger?.debug({ mcpServer: name, stderr: line }, 'MCP server stderr'),
  });
  return {
    transport,
    pid: () => transport.pid,
    detail() {
      const exit = transport.exit === undefined ? '' : `; the process ${transport.exit}`;
      const stderr = transport.stderrTail.trim();
      return stderr === '' ? exit : `${exit}; stderr: ${stderr}`;
    },
  };
}

function openHttp(
  name: string,
  config: McpHttpServerConfig,
  env: Readonly<Record<string, string | undefined>>,
): Opened {
  const headers = resolvePlaceholders(config.headers ?? {}, env, { server: name, what: 'header' });
  const transport = new StreamableHTTPClientTransport(new URL(config.url), { requestInit: { headers } });
  return { transport, pid: () => undefined, detail: () => '' };
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
  server: string,
  tool: McpTool,
  client: Client,
  timeoutMs: number,
  logger: Logger | undefined,
): Tool {
  const name = `${server}.${tool.name}`;
  return {
    name,
    description: tool.description ?? tool.title ?? `${tool.name}, a tool of MCP server ${server}`,
    input: inputSchemaOf(name, tool.inputSchema, logger),
    timeoutMs,
    // The server's own word that a call may be repeated (MCP tool annotations).
    rerunnable: tool.annotations?.readOnlyHint === true || tool.annotations?.idempotentHint === true,
    async run(input, ctx) {
      let result: Awaited<ReturnType<Client['callTool']>>;
      try {
        const args = input as Record<string, unknown>;
        result = await client.callTool({ name: tool.name, arguments: args }, undefined, {
          signal: ctx.signal,
          timeout: timeoutMs,
        });
      } catch (error) {
        throw callFailure(name, server, timeoutMs, error, ctx.signal);
      }
      return renderMcpToolResult(name, result as CallToolResult);
    },
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

function callFailure(
  toolName: string,
  server: string,
  timeoutMs: number,
  error: unknown,
  signal: AbortSignal,
): ToolError {
  // The executor aborts with the ToolError that says why (timeout, cancellation).
  if (signal.aborted && signal.reason instanceof ToolError) return signal.reason;
  if (error instanceof ToolError) return error;
  if (error instanceof McpError) {
    if (error.code === ErrorCode.RequestTimeout) {
      return new ToolError('timeout', `${toolName} timed out after ${timeoutMs} ms`, { cause: error });
    }
    if (error.code === ErrorCode.InvalidParams) {
      return new ToolError('invalid_arguments', `${toolName} refused its arguments: ${error.message}`, {
        cause: error,
      });
    }
    if (error.code === ErrorCode.ConnectionClosed) {
      return new ToolError('failed', `${toolName} failed: MCP server ${server} closed the connection`, {
        cause: error,
      });
    }
  }
  return new ToolError('failed', `${toolName} failed: ${reasonOf(error)}`, { cause: error });
}

function combinedFailure(failures: readonly unknown[]): unknown {
  if (failures.length === 1) return failures[0];
  const lines = failures.map(
    (failure) => `- ${failure instanceof Error ? failure.message : String(failure)}`,
  );
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

// Includes the causes, since `fetch failed` alone does not say that the connection was refused.
function reasonOf(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'ENOENT' && (error as NodeJS.ErrnoException).syscall?.startsWith('spawn')) {
    return `command not found (${error.message})`;
  }
  return error.cause instanceof Error ? `${error.message}: ${reasonOf(error.cause)}` : error.message;
}

async function isDirectory(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isDirectory();
  } catch {
    return false;
  }
}

function withinMs<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
