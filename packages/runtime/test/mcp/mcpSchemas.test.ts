import { createServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectMcpServers } from '../../src/mcp/mcpToolSource.ts';
import { ToolRegistry } from '../../src/tools/toolRegistry.ts';
import { call, captureLogger, executorFor } from './mcpFixture.ts';

// Tools whose schemas and names a zod-built server cannot produce: written out as raw JSON.
const listed = [
  {
    name: 'lookup',
    description: 'Schema with a remote $ref zod cannot follow',
    inputSchema: { type: 'object', properties: { id: { $ref: 'https://example.com/schemas/id.json' } } },
    annotations: { readOnlyHint: true },
  },
  { name: 'docs/search', description: 'A name models reject', inputSchema: { type: 'object' } },
  {
    name: 'echo',
    inputSchema: {
      type: 'object',
      properties: { kind: { type: 'string', enum: ['a', 'b'] } },
      required: ['kind'],
      additionalProperties: false,
    },
    annotations: { idempotentHint: true },
  },
];

function lowLevelServer(): Server {
  const server = new Server({ name: 'raw', version: '1.0.0' }, { capabilities: { tools: {} } });
  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: listed }));
  server.setRequestHandler(CallToolRequestSchema, async (request) => ({
    content: [
      { type: 'text', text: `${request.params.name} got ${JSON.stringify(request.params.arguments)}` },
    ],
  }));
  return server;
}

let http: HttpServer;
let url: string;

beforeAll(async () => {
  // Stateless (no session id generator): every request gets its own server and transport.
  http = createServer((req, res) => {
    const transport = new StreamableHTTPServerTransport({});
    const server = lowLevelServer();
    res.on('close', () => void server.close());
    server
      .connect(transport)
      .then(() => transport.handleRequest(req, res))
      .catch(() => res.writeHead(500).end());
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(http.address() as AddressInfo).port}/mcp`;
});

afterAll(async () => {
  http.closeAllConnections();
  await new Promise<void>((resolve) => http.close(() => resolve()));
});

describe('MCP tool schemas and names', () => {
  it('falls back to any JSON object, with a warning, when a schema cannot be converted', async () => {
    const { logger, lines } = captureLogger();
    const mcp = await connectMcpServers({ raw: { transport: 'http', url } }, { logger });
    try {
      const lookup = mcp.tools.find((tool) => tool.name === 'raw.lookup');
      expect(lookup).toBeDefined();
      const warning = lines.find((line) => line.msg.includes('could not be converted'));
      expect(warning).toMatchObject({ tool: 'raw.lookup' });
      expect(warning?.reason).toContain('$ref');
      const [definition] = new ToolRegistry()
        .register(lookup as NonNullable<typeof lookup>)
        .definitions(['raw.lookup']);
      expect(definition?.parameters.type).toBe('object');
      const result = await call(executorFor(mcp.tools, ['raw.lookup']), 'raw.lookup', { id: 7, more: true });
      expect(result).toMatchObject({ ok: true, output: 'lookup got {"id":7,"more":true}' });
    } finally {
      await mcp.close();
    }
  });

  it('skips, with a warning, a tool whose name a model provider would reject', async () => {
    const { logger, lines } = captureLogger();
    const mcp = await connectMcpServers({ raw: { transport: 'http', url } }, { logger });
    await mcp.close();
    expect(mcp.tools.map((tool) => tool.name)).toEqual(['raw.lookup', 'raw.echo']);
    expect(lines.find((line) => line.tool === 'docs/search')?.msg).toContain('tool skipped');
  });

  it('marks a tool read-only from its readOnlyHint alone, and rerunnable from readOnlyHint or idempotentHint', async () => {
    const mcp = await connectMcpServers({ raw: { transport: 'http', url } });
    await mcp.close();
    const flags = mcp.tools.map(({ name, rerunnable, readOnly }) => ({ name, rerunnable, readOnly }));
    expect(flags).toEqual([
      { name: 'raw.lookup', rerunnable: true, readOnly: true },
      { name: 'raw.echo', rerunnable: true, readOnly: false },
    ]);
  });

  it('keeps enums and strictness of a converted schema, and falls back to a description', async () => {
    const mcp = await connectMcpServers({ raw: { transport: 'http', url } });
    try {
      const echo = mcp.tools.find((tool) => tool.name === 'raw.echo');
      expect(echo?.description).toBe('echo, a tool of MCP server raw');
      const executor = executorFor(mcp.tools, ['raw.echo']);
      expect((await call(executor, 'raw.echo', { kind: 'a' })).output).toBe('echo got {"kind":"a"}');
      expect((await call(executor, 'raw.echo', { kind: 'c' })).error?.code).toBe('invalid_arguments');
      expect((await call(executor, 'raw.echo', { kind: 'a', extra: 1 })).error?.code).toBe(
        'invalid_arguments',
      );
    } finally {
      await mcp.close();
    }
  });
});
