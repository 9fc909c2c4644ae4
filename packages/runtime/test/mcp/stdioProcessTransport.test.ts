import { describe, expect, it } from 'vitest';
import { StdioProcessTransport } from '../../src/mcp/stdioProcessTransport.ts';
import { processExists } from './mcpFixture.ts';

// Ignores SIGTERM and the end of stdin: only SIGKILL ends it. It says so once its handler is in place: a SIGTERM
// sent before that (a slow start on a loaded machine) would still end it.
const stubborn =
  "process.on('SIGTERM', () => {}); process.stdin.resume(); setInterval(() => {}, 1000); console.error('ready');";

describe('StdioProcessTransport', () => {
  it('escalates to SIGTERM and SIGKILL when the child does not exit on its own', async () => {
    const lines: string[] = [];
    const transport = new StdioProcessTransport({
      command: process.execPath,
      args: ['-e', stubborn],
      env: {},
      graceMs: 150,
      onStderrLine: (line) => lines.push(line),
    });
    let closed = false;
    transport.onclose = () => {
      closed = true;
    };
    await transport.start();
    const pid = transport.pid as number;
    expect(processExists(pid)).toBe(true);
    await expect.poll(() => lines, { timeout: 20_000 }).toContain('ready');
    await transport.close();
    expect(processExists(pid)).toBe(false);
    expect(transport.exit).toBe('killed by SIGKILL');
    await expect.poll(() => closed).toBe(true);
  });

  it('gives the child exactly the environment it is given', async () => {
    const lines: string[] = [];
    const transport = new StdioProcessTransport({
      command: process.execPath,
      args: ['-e', 'console.error(JSON.stringify(Object.keys(process.env).sort()))'],
      env: { ONLY_THIS: '1' },
      onStderrLine: (line) => lines.push(line),
    });
    const closed = new Promise<void>((resolve) => {
      transport.onclose = resolve;
    });
    await transport.start();
    await closed;
    expect(lines).toEqual(['["ONLY_THIS"]']);
    expect(transport.stderrTail).toBe('["ONLY_THIS"]');
    expect(transport.exit).toBe('exited with code 0');
  });

  it('reports a command that cannot be spawned by rejecting start()', async () => {
    const transport = new StdioProcessTransport({ command: 'troupe-no-such-command', args: [], env: {} });
    await expect(transport.start()).rejects.toMatchObject({ code: 'ENOENT' });
    await transport.close();
    await expect(transport.send({ jsonrpc: '2.0', method: 'ping', id: 1 })).rejects.toThrow(
      'the MCP server process is not running',
    );
  });
});
