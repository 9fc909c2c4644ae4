import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { errorMessage } from '@troupe/protocol';
import { z } from 'zod';

/** One `tools/call` a test MCP server received. */
export interface McpToolCall {
  name: string;
  arguments: Record<string, unknown>;
}

/** One HTTP request a test MCP server received. */
export interface McpHttpRequest {
  method: string;
  headers: IncomingMessage['headers'];
}

/** A real MCP server over streamable HTTP, with the tools `add`, `fail`, `slow` and `progress`. */
export interface TestMcpHttpServer {
  /** The endpoint to give a client, `http://127.0.0.1:<port>/mcp`. */
  url: string;
  /** Every tool call received, in arrival order. */
  calls: McpToolCall[];
  /** The calls whose client cancelled them before they finished. */
  cancelled: McpToolCall[];
  /** Every HTTP request's method and headers, in arrival order, so tests can check what a client sent. */
  requests: McpHttpRequest[];
  /** Ends every session, as a restart of the server would: requests in them get 404 from now on. */
  dropSessions(): Promise<void>;
  /**
   * Answers requests with this HTTP status from now on, as a server that is down behind a proxy would: all of them,
   * or only those that would open a new session. `undefined` ends that.
   */
  failWith(status: number | undefined, which?: 'all' | 'new sessions'): void;
  /** Closes every session and the HTTP server. */
  stop(): Promise<void>;
}

/** Absolute path of the stdio test server script; run it with `node --import tsx <path>` from the repo root. */
export const TEST_MCP_STDIO_SERVER: string = fileURLToPath(new URL('./mcpStdioServer.ts', import.meta.url));

/** Registers `add`: `{ a, b }` → text `a+b=N` and structured content `{ sum }`. */
export function registerAddTool(server: McpServer, calls: McpToolCall[]): void {
  server.registerTool(
    'add',
    {
      description: 'Add two numbers',
      inputSchema: { a: z.number().describe('First addend'), b: z.number().describe('Second addend') },
      outputSchema: { sum: z.number() },
    },
    async ({ a, b }) => {
      calls.push({ name: 'add', arguments: { a, b } });
      const sum = a + b;
      return { content: [{ type: 'text', text: `${a}+${b}=${sum}` }], structuredContent: { sum } };
    },
  );
}

/**
 * Registers `progress`: `{ steps }` → sends `steps` progress notifications (`i` of `steps`, message `step i of
 * steps`) when the client asked for them, then answers `done after <steps> steps`.
 */
export function registerProgressTool(server: McpServer, calls: McpToolCall[]): void {
  server.registerTool(
    'progress',
    {
      description: 'Report progress, then answer',
      inputSchema: { steps: z.number().int().min(1).max(100).describe('How many progress notifications') },
    },
    async ({ steps }, extra) => {
      calls.push({ name: 'progress', arguments: { steps } });
      const progressToken = extra._meta?.progressToken;
      if (progressToken !== undefined) {
        for (let step = 1; step <= steps; step += 1) {
          await extra.sendNotification({
            method: 'notifications/progress',
            params: { progressToken, progress: step, total: steps, message: `step ${step} of ${steps}` },
          });
        }
      }
      return { content: [{ type: 'text', text: `done after ${steps} steps` }] };
    },
  );
}

function buildHttpTestServer(calls: McpToolCall[], cancelled: McpToolCall[]): McpServer {
  const server = new McpServer({ name: 'troupe-test-http', version: '1.0.0' });
  registerAddTool(server, calls);
  server.registerTool('fail', { description: 'Always fails', inputSchema: {} }, async () => {
    calls.push({ name: 'fail', arguments: {} });
    return { content: [{ type: 'text', text: 'it failed on purpose' }], isError: true };
  });
  server.registerTool(
    'slow',
    {
      description: 'Wait, then answer',
      inputSchema: { ms: z.number().int().min(0).describe('How long to wait') },
    },
    async ({ ms }, extra) => {
      const call = { name: 'slow', arguments: { ms } };
      calls.push(call);
      const finished = await waitUnlessAborted(ms, extra.signal);
      if (!finished) cancelled.push(call);
      return { content: [{ type: 'text', text: finished ? `waited ${ms} ms` : 'cancelled' }] };
    },
  );
  registerProgressTool(server, calls);
  return server;
}

function waitUnlessAborted(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve(true);
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

interface Session {
  transport: StreamableHTTPServerTransport;
  server: McpServer;
}

/**
 * Starts a real MCP server over streamable HTTP on 127.0.0.1 and a free port, one MCP session per client.
 *
 * @example
 * const mcp = await startTestMcpHttpServer();
 * const connections = await connectMcpServers({ srv: { transport: 'http', url: mcp.url } });
 * await mcp.stop();
 */
export async function startTestMcpHttpServer(): Promise<TestMcpHttpServer> {
  const calls: McpToolCall[] = [];
  const cancelled: McpToolCall[] = [];
  const requests: McpHttpRequest[] = [];
  const sessions = new Map<string, Session>();
  let failing: { status: number; which: 'all' | 'new sessions' } | undefined;

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    requests.push({ method: req.method ?? 'GET', headers: req.headers });
    const sessionId = req.headers['mcp-session-id'];
    if (failing && (failing.which === 'all' || typeof sessionId !== 'string')) {
      res
        .writeHead(failing.status, { 'content-type': 'text/plain' })
        .end(`failing on purpose with ${failing.status}`);
      return;
    }
    if (!req.url?.startsWith('/mcp')) {
      res.writeHead(404).end();
      return;
    }
    if (typeof sessionId === 'string') {
      const session = sessions.get(sessionId);
      if (!session) {
        res.writeHead(404, { 'content-type': 'application/json' }).end(
          JSON.stringify({
            jsonrpc: '2.0',
            error: { code: -32001, message: 'Session not found' },
            id: null,
          }),
        );
        return;
      }
      await session.transport.handleRequest(req, res);
      return;
    }
    // No session yet: this must be an initialize request, which the new transport checks.
    const server = buildHttpTestServer(calls, cancelled);
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => {
        sessions.set(id, { transport, server });
      },
      onsessionclosed: (id) => {
        sessions.delete(id);
      },
    });
    await server.connect(transport);
    await transport.handleRequest(req, res);
  };

  const http = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
      res.end(errorMessage(error));
    });
  });
  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = http.address() as AddressInfo;
  const dropSessions = async (): Promise<void> => {
    const open = [...sessions.values()];
    sessions.clear();
    await Promise.allSettled(open.map(({ server }) => server.close()));
  };

  return {
    url: `http://127.0.0.1:${port}/mcp`,
    calls,
    cancelled,
    requests,
    dropSessions,
    failWith(status, which = 'all') {
      failing = status === undefined ? undefined : { status, which };
    },
    async stop() {
      await dropSessions();
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}
