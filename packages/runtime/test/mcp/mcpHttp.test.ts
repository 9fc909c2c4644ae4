// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${VAR} placeholders are the config syntax under test.
import { startTestMcpHttpServer, type TestMcpHttpServer } from '@troupe/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { McpServerError } from '../../src/mcp/mcpServerError.ts';
import { connectMcpServers, type McpConnections } from '../../src/mcp/mcpToolSource.ts';
import { ToolRegistry } from '../../src/tools/toolRegistry.ts';
import { call, captureLogger, eventually, executorFor, rejectionOf } from './mcpFixture.ts';

let server: TestMcpHttpServer;
const open: McpConnections[] = [];

async function connect(...args: Parameters<typeof connectMcpServers>): Promise<McpConnections> {
  const connections = await connectMcpServers(...args);
  open.push(connections);
  return connections;
}

beforeAll(async () => {
  server = await startTestMcpHttpServer();
});

afterEach(async () => {
  await Promise.all(open.splice(0).map((connections) => connections.close()));
});

afterAll(async () => {
  await server.stop();
});

describe('connectMcpServers over streamable HTTP', () => {
  it('offers every tool of the server as <server>.<tool>, with its description and JSON Schema', async () => {
    const { logger, lines } = captureLogger();
    const mcp = await connect({ srv: { transport: 'http', url: server.url } }, { logger });
    expect(mcp.tools.map((tool) => tool.name)).toEqual(['srv.add', 'srv.fail', 'srv.slow']);
    expect(mcp.servers).toEqual([
      { name: 'srv', transport: 'http', tools: ['srv.add', 'srv.fail', 'srv.slow'] },
    ]);
    const registry = new ToolRegistry();
    for (const tool of mcp.tools) registry.register(tool);
    const [add] = registry.definitions(['srv.add']);
    expect(add?.description).toBe('Add two numbers');
    expect(add?.parameters).toMatchObject({
      type: 'object',
      properties: {
        a: { type: 'number', description: 'First addend' },
        b: { type: 'number', description: 'Second addend' },
      },
      required: ['a', 'b'],
    });
    const connected = lines.find((line) => line.msg === 'MCP server connected');
    expect(connected).toMatchObject({ mcpServer: 'srv', tools: ['srv.add', 'srv.fail', 'srv.slow'] });
  });

  it('runs srv.add through the executor and returns its text and structured content', async () => {
    const mcp = await connect({ srv: { transport: 'http', url: server.url } });
    const result = await call(executorFor(mcp.tools, ['srv.add']), 'srv.add', { a: 2, b: 3 });
    expect(result).toMatchObject({ ok: true, tool: 'srv.add', decision: 'allow' });
    expect(result.output).toBe('2+3=5\n{"sum":5}');
    expect(server.calls.at(-1)).toEqual({ name: 'add', arguments: { a: 2, b: 3 } });
  });

  it('refuses bad arguments with the schema built from the server, before the server sees them', async () => {
    const mcp = await connect({ srv: { transport: 'http', url: server.url } });
    const before = server.calls.length;
    const result = await call(executorFor(mcp.tools, ['srv.add']), 'srv.add', { a: 'two' });
    expect(result.ok).toBe(false);
    expect(result.error?.code).toBe('invalid_arguments');
    expect(result.output).toContain('invalid arguments for srv.add');
    expect(result.output).toMatch(/- a: .*expected number/);
    expect(result.output).toMatch(/- b: /);
    expect(server.calls.length).toBe(before);
  });

  it("turns a result flagged isError into a failed call carrying the server's message", async () => {
    const mcp = await connect({ srv: { transport: 'http', url: server.url } });
    const result = await call(executorFor(mcp.tools, ['srv.fail']), 'srv.fail', {});
    expect(result).toMatchObject({ ok: false, output: 'it failed on purpose' });
    expect(result.error).toEqual({ code: 'failed', message: 'it failed on purpose' });
  });

  it('times a slow call out after the configured timeout and cancels it on the server', async () => {
    const mcp = await connect({ srv: { transport: 'http', url: server.url, timeout: 0.3 } });
    const slow = mcp.tools.find((tool) => tool.name === 'srv.slow');
    expect(slow?.timeoutMs).toBe(300);
    const started = Date.now();
    const result = await call(executorFor(mcp.tools, ['srv.slow']), 'srv.slow', { ms: 10_000 });
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(result.ok).toBe(false);
    expect(result.error).toEqual({ code: 'timeout', message: 'srv.slow timed out after 300 ms' });
    await eventually(() => server.cancelled.some((seen) => seen.arguments.ms === 10_000));
  });

  it('cancels a running call on the server when the agent is cancelled', async () => {
    const mcp = await connect({ srv: { transport: 'http', url: server.url } });
    const controller = new AbortController();
    const running = call(executorFor(mcp.tools, ['srv.slow']), 'srv.slow', { ms: 9_000 }, controller.signal);
    await eventually(() => server.calls.some((seen) => seen.arguments.ms === 9_000));
    controller.abort();
    const result = await running;
    expect(result.error?.code).toBe('cancelled');
    await eventually(() => server.cancelled.some((seen) => seen.arguments.ms === 9_000));
  });

  it('exposes only the allowlisted tools and warns about allowlisted names the server lacks', async () => {
    const { logger, lines } = captureLogger();
    const mcp = await connect(
      { srv: { transport: 'http', url: server.url, tools: ['add', 'nope'] } },
      { logger },
    );
    expect(mcp.tools.map((tool) => tool.name)).toEqual(['srv.add']);
    expect(mcp.servers[0]?.tools).toEqual(['srv.add']);
    const warning = lines.find((line) => line.msg.includes('does not offer every tool'));
    expect(warning).toMatchObject({ mcpServer: 'srv', missing: ['nope'] });
    const result = await call(executorFor(mcp.tools, ['srv.add', 'srv.fail']), 'srv.fail', {});
    expect(result.error?.code).toBe('unknown_tool');
  });

  it('sends configured headers with ${VAR} placeholders resolved from the given env', async () => {
    const mark = server.requests.length;
    await connect(
      { srv: { transport: 'http', url: server.url, headers: { Authorization: 'Bearer ${TEST_TOKEN}' } } },
      { env: { TEST_TOKEN: 'tok-123' } },
    );
    const sent = server.requests.slice(mark);
    expect(sent.length).toBeGreaterThan(0);
    expect(sent.every(({ headers }) => headers.authorization === 'Bearer tok-123')).toBe(true);
  });

  it('refuses a header placeholder whose variable is not set, naming it', async () => {
    const error = await rejectionOf(
      connectMcpServers(
        {
          srv: { transport: 'http', url: server.url, headers: { Authorization: 'Bearer ${NO_SUCH_TOKEN}' } },
        },
        { env: {} },
      ),
    );
    expect(error).toBeInstanceOf(McpServerError);
    expect(error).toMatchObject({ code: 'missing_env', server: 'srv' });
    expect((error as Error).message).toBe(
      "MCP server srv: header Authorization references ${NO_SUCH_TOKEN}, but that variable is not set in the coordinator's environment",
    );
  });

  it('fails clearly when nothing answers at the URL, naming the server and the URL', async () => {
    const stopped = await startTestMcpHttpServer();
    await stopped.stop();
    const error = await rejectionOf(
      connectMcpServers({ down: { transport: 'http', url: `${stopped.url}?key=secret`, timeout: 5 } }),
    );
    expect(error).toMatchObject({ code: 'start_failed', server: 'down' });
    const message = (error as Error).message;
    expect(message).toContain(`MCP server down (http: ${stopped.url}) failed to start: `);
    expect(message).not.toContain('secret');
  });

  it('closes the servers that did connect when another fails, and reports the failure', async () => {
    const mark = server.requests.length;
    const error = await rejectionOf(
      connectMcpServers({
        srv: { transport: 'http', url: server.url },
        broken: { transport: 'stdio', command: '/nonexistent/mcp-server' },
      }),
    );
    expect(error).toMatchObject({ code: 'start_failed', server: 'broken' });
    const sent = server.requests.slice(mark);
    expect(sent.some(({ method }) => method === 'POST')).toBe(true);
    // The session that did open was ended with DELETE, not left open.
    expect(sent.some(({ method, headers }) => method === 'DELETE' && headers['mcp-session-id'])).toBe(true);
  });

  it('gives a clear tool error for a call after close()', async () => {
    const mcp = await connectMcpServers({ srv: { transport: 'http', url: server.url } });
    const executor = executorFor(mcp.tools, ['srv.add']);
    await mcp.close();
    await mcp.close();
    const result = await call(executor, 'srv.add', { a: 1, b: 1 });
    expect(result.ok).toBe(false);
    expect(result.error?.code).toBe('failed');
    expect(result.output).toMatch(/^srv\.add failed: /);
  });

  it('refuses an invalid config before connecting anything', async () => {
    const error = await rejectionOf(
      connectMcpServers({
        Bad_Name: { transport: 'http', url: server.url },
        ok: { transport: 'http', url: 'ftp://example.com' },
      } as never),
    );
    expect(error).toMatchObject({ code: 'invalid_config' });
    expect((error as Error).message).toMatch(/^invalid MCP server config:\n- Bad_Name: /);
    expect((error as Error).message).toContain('- ok.url: ');
  });
});
