// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${VAR} placeholders are the config syntax under test.

import { tmpdir } from 'node:os';
import { startTestMcpHttpServer, type TestMcpHttpServer } from '@troupe/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { McpServerError } from '../../src/mcp/mcpServerError.ts';
import { connectMcpServers, type McpConnections } from '../../src/mcp/mcpToolSource.ts';
import type { ToolProgressUpdate } from '../../src/tools/progressThrottle.ts';
import type { ToolProgress } from '../../src/tools/tool.ts';
import { ToolExecutor } from '../../src/tools/toolExecutor.ts';
import { ToolRegistry } from '../../src/tools/toolRegistry.ts';
import { call, captureLogger, eventually, executorFor, manualClock, rejectionOf } from './mcpFixture.ts';

let server: TestMcpHttpServer;
const open: McpConnections[] = [];
const ownServers: TestMcpHttpServer[] = [];

/** A server of the test's own, for tests that break it. */
async function ownServer(): Promise<TestMcpHttpServer> {
  const own = await startTestMcpHttpServer();
  ownServers.push(own);
  return own;
}

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
  await Promise.all(ownServers.splice(0).map((own) => own.stop()));
});

afterAll(async () => {
  await server.stop();
});

describe('connectMcpServers over streamable HTTP', () => {
  it('offers every tool of the server as <server>.<tool>, with its description and JSON Schema', async () => {
    const { logger, lines } = captureLogger();
    const mcp = await connect({ srv: { transport: 'http', url: server.url } }, { logger });
    const all = ['srv.add', 'srv.fail', 'srv.slow', 'srv.progress'];
    expect(mcp.tools.map((tool) => tool.name)).toEqual(all);
    expect(mcp.servers).toEqual([{ name: 'srv', transport: 'http', tools: all }]);
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
    expect(connected).toMatchObject({ mcpServer: 'srv', tools: all });
  });

  it('runs srv.add through the executor and returns its text, which already says what its structured content does', async () => {
    const mcp = await connect({ srv: { transport: 'http', url: server.url } });
    const result = await call(executorFor(mcp.tools, ['srv.add']), 'srv.add', { a: 2, b: 3 });
    expect(result).toMatchObject({ ok: true, tool: 'srv.add', decision: 'allow' });
    expect(result.output).toBe('2+3=5');
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

describe('an HTTP MCP server that fails', () => {
  it('names the server, its endpoint and the cause when nothing answers any more', async () => {
    const own = await ownServer();
    const mcp = await connect({ srv: { transport: 'http', url: own.url } });
    await own.stop();
    const executor = executorFor(mcp.tools, ['srv.add']);
    const prefix = `^srv\\.add failed: MCP server srv \\(http: ${own.url}\\) could not be reached: `;
    // Requests may first go out on kept-alive connections that the server's stop closed; then none connects.
    const first = await call(executor, 'srv.add', { a: 1, b: 1 });
    expect(first).toMatchObject({ ok: false, error: { code: 'failed' } });
    expect(first.output).toMatch(new RegExp(`${prefix}connection (refused|closed by the server)`));
    await expect
      .poll(async () => (await call(executor, 'srv.add', { a: 1, b: 1 })).output)
      .toMatch(new RegExp(`${prefix}connection refused \\(fetch failed: .*ECONNREFUSED`));
  });

  it('names the HTTP status the server answered with', async () => {
    const own = await ownServer();
    const mcp = await connect({ srv: { transport: 'http', url: own.url } });
    own.failWith(502);
    const result = await call(executorFor(mcp.tools, ['srv.add']), 'srv.add', { a: 1, b: 1 });
    expect(result.output).toBe(
      `srv.add failed: MCP server srv (http: ${own.url}) answered HTTP 502: failing on purpose with 502`,
    );
  });

  it('opens a new session when the server forgot its session, and runs the call there, once', async () => {
    const own = await ownServer();
    const { logger, lines } = captureLogger();
    const mcp = await connect({ srv: { transport: 'http', url: own.url } }, { logger });
    await own.dropSessions();
    const result = await call(executorFor(mcp.tools, ['srv.add']), 'srv.add', { a: 2, b: 5 });
    expect(result).toMatchObject({ ok: true, output: '2+5=7' });
    expect(own.calls.filter((seen) => seen.name === 'add')).toHaveLength(1);
    expect(lines.find((line) => line.msg === 'reconnecting to MCP server')).toMatchObject({
      level: 40,
      mcpServer: 'srv',
      attempt: 1,
    });
  });

  it('backs off after a failed reconnection: calls fail at once without a request, then reconnect', async () => {
    const own = await ownServer();
    const clock = manualClock();
    const mcp = await connect({ srv: { transport: 'http', url: own.url } }, { clock });
    const executor = executorFor(mcp.tools, ['srv.add']);
    await own.dropSessions();
    own.failWith(503, 'new sessions');

    const first = await call(executor, 'srv.add', { a: 1, b: 1 });
    expect(first.output).toMatch(
      new RegExp(
        `^srv\\.add failed: MCP server srv \\(http: ${own.url}\\) is unavailable: reconnection attempt 1 failed at ` +
          '\\d\\d:\\d\\d:\\d\\d UTC: answered HTTP 503: failing on purpose with 503; ' +
          'reconnecting on the first call after \\d+ (ms|s) \\(attempt 2\\)$',
      ),
    );
    const posts = () => own.requests.filter((request) => request.method === 'POST').length;
    const before = posts();
    const second = await call(executor, 'srv.add', { a: 1, b: 1 });
    expect(second.output).toMatch(/\(attempt 2\)$/);
    expect(posts()).toBe(before);

    own.failWith(undefined);
    clock.advance(1_000);
    expect(await call(executor, 'srv.add', { a: 1, b: 2 })).toMatchObject({ ok: true, output: '1+2=3' });
  });
});

describe('progress of an MCP tool', () => {
  it("forwards the server's progress notifications to ctx.progress", async () => {
    const mcp = await connect({ srv: { transport: 'http', url: server.url } });
    const tool = mcp.tools.find((candidate) => candidate.name === 'srv.progress');
    const updates: ToolProgress[] = [];
    const output = await tool?.run(
      { steps: 3 },
      {
        workspace: tmpdir(),
        taskId: 'task-mcp',
        agent: 'tester',
        callId: 'call-p',
        signal: new AbortController().signal,
        progress: (update) => updates.push(update),
      },
    );
    expect(output).toBe('done after 3 steps');
    expect(updates).toEqual(
      [1, 2, 3].map((step) => ({ progress: step, total: 3, message: `step ${step} of 3` })),
    );
  });

  it('reaches the executor’s onProgress, throttled, the last update always among them', async () => {
    const mcp = await connect({ srv: { transport: 'http', url: server.url } });
    const registry = new ToolRegistry();
    for (const tool of mcp.tools) registry.register(tool);
    const seen: Array<{ callId: string; tool: string } & ToolProgressUpdate> = [];
    const executor = new ToolExecutor({
      registry,
      policy: { tools: ['srv.progress'], rules: [] },
      agent: 'tester',
      workspace: tmpdir(),
      taskId: 'task-mcp',
      onProgress: (callId, tool, update) => seen.push({ callId, tool, ...update }),
    });
    const result = await executor.execute({ id: 'call-p', name: 'srv.progress', arguments: '{"steps":3}' });
    expect(result).toMatchObject({ ok: true, output: 'done after 3 steps' });
    expect(seen.length).toBeGreaterThanOrEqual(2);
    expect(seen.map((update) => update.seq)).toEqual(seen.map((_, index) => index));
    expect(seen[0]).toEqual({
      callId: 'call-p',
      tool: 'srv.progress',
      seq: 0,
      progress: 1,
      total: 3,
      message: 'step 1 of 3',
    });
    expect(seen.at(-1)).toMatchObject({ progress: 3, total: 3, message: 'step 3 of 3' });
  });
});
