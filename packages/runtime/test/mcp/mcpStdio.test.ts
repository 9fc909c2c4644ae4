// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${VAR} placeholders are the config syntax under test.
import { afterEach, describe, expect, it } from 'vitest';
import { McpServerError } from '../../src/mcp/mcpServerError.ts';
import { connectMcpServers } from '../../src/mcp/mcpToolSource.ts';
import {
  call,
  captureLogger,
  executorFor,
  processExists,
  rejectionOf,
  stdioServer,
  trackedConnections,
} from './mcpFixture.ts';

const { connect, closeAll } = trackedConnections();

afterEach(async () => {
  await closeAll();
  delete process.env.TROUPE_MCP_SECRET;
  delete process.env.TROUPE_MCP_GREETING;
});

describe('connectMcpServers over stdio', () => {
  it('starts the server as a child process and runs its tools', async () => {
    const mcp = await connect({ std: stdioServer });
    expect(mcp.tools.map((tool) => tool.name)).toEqual(['std.add', 'std.env', 'std.exit']);
    expect(mcp.servers[0]).toMatchObject({
      name: 'std',
      transport: 'stdio',
      tools: ['std.add', 'std.env', 'std.exit'],
    });
    const result = await call(executorFor(mcp.tools, ['std.add']), 'std.add', { a: 40, b: 2 });
    expect(result).toMatchObject({ ok: true, output: '40+2=42' });
  });

  it("passes the child only PATH, HOME, LANG and the configured env, not the coordinator's secrets", async () => {
    process.env.TROUPE_MCP_SECRET = 'do-not-leak';
    process.env.TROUPE_MCP_GREETING = 'hello from the coordinator';
    const mcp = await connect({
      std: { ...stdioServer, env: { GREETING: '${TROUPE_MCP_GREETING}!', PLAIN: 'as is' } },
    });
    const executor = executorFor(mcp.tools, ['std.env']);
    const env = async (name: string) => (await call(executor, 'std.env', { name })).output;
    expect(await env('TROUPE_MCP_SECRET')).toBe('TROUPE_MCP_SECRET is not set');
    expect(await env('TROUPE_MCP_GREETING')).toBe('TROUPE_MCP_GREETING is not set');
    expect(await env('GREETING')).toBe('hello from the coordinator!');
    expect(await env('PLAIN')).toBe('as is');
    expect(await env('PATH')).toBe(process.env.PATH);
    expect(await env('USER')).toBe('USER is not set');
    expect(await env('SHELL')).toBe('SHELL is not set');
  });

  it('refuses an env placeholder whose variable is not set, naming it and the server', async () => {
    const error = await rejectionOf(
      connectMcpServers({ std: { ...stdioServer, env: { GREETING: '${TROUPE_MCP_GREETING}' } } }),
    );
    expect(error).toBeInstanceOf(McpServerError);
    expect(error).toMatchObject({ code: 'missing_env', server: 'std' });
    expect((error as Error).message).toContain(
      'MCP server std: env GREETING references ${TROUPE_MCP_GREETING}',
    );
  });

  it('fails clearly when the command does not exist, naming the server and the command', async () => {
    const error = await rejectionOf(
      connectMcpServers({
        files: { transport: 'stdio', command: 'troupe-no-such-mcp-server', args: ['--x'] },
      }),
    );
    expect(error).toMatchObject({ code: 'start_failed', server: 'files' });
    expect((error as Error).message).toMatch(
      /^MCP server files \(stdio: troupe-no-such-mcp-server --x\) failed to start: command not found/,
    );
  });

  it('fails clearly when the server exits before speaking MCP, with its exit and stderr', async () => {
    const error = await rejectionOf(
      connectMcpServers({ crashy: { ...stdioServer, args: [...(stdioServer.args ?? []), '--crash'] } }),
    );
    expect(error).toMatchObject({ code: 'start_failed', server: 'crashy' });
    const message = (error as Error).message;
    expect(message).toContain(`MCP server crashy (stdio: ${process.execPath} --import tsx`);
    expect(message).toContain('the process exited with code 3');
    expect(message).toContain('stderr: test MCP server crashed on purpose');
  });

  it('fails clearly when the configured cwd is not a directory', async () => {
    const error = await rejectionOf(connectMcpServers({ std: { ...stdioServer, cwd: '/nonexistent/dir' } }));
    expect(error).toMatchObject({ code: 'start_failed', server: 'std' });
    expect((error as Error).message).toContain('cwd /nonexistent/dir is not a directory');
  });

  it('ends the child process on close()', async () => {
    const { logger, lines } = captureLogger();
    const mcp = await connectMcpServers({ std: stdioServer }, { logger });
    const pid = mcp.servers[0]?.pid;
    expect(pid).toBeTypeOf('number');
    expect(processExists(pid as number)).toBe(true);
    await mcp.close();
    expect(processExists(pid as number)).toBe(false);
    expect(lines.some((line) => line.msg.includes('disconnected'))).toBe(false);
  });
});
