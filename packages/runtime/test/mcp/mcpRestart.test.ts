import { randomUUID } from 'node:crypto';
import { rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  call,
  captureLogger,
  executorFor,
  type ManualClock,
  manualClock,
  processExists,
  stdioServer,
  trackedConnections,
} from './mcpFixture.ts';

const { connect, closeAll } = trackedConnections();
const markers: string[] = [];
// Starting node with tsx takes seconds on a loaded machine.
const slow = { timeout: 20_000 };

afterEach(async () => {
  await closeAll();
  await Promise.all(markers.splice(0).map((marker) => rm(marker, { force: true })));
});

const literal = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const who = `MCP server std \\(stdio: ${literal(process.execPath)} --import tsx \\S+mcpStdioServer\\.ts[^)]*\\)`;
const clockTime = '\\d\\d:\\d\\d:\\d\\d UTC';

/** Waits until exactly one restart is scheduled and returns its wait. */
async function scheduledWait(clock: ManualClock): Promise<number> {
  await expect.poll(() => clock.pending(), slow).toHaveLength(1);
  return clock.pending()[0] as number;
}

describe('a stdio MCP server that dies', { timeout: 60_000 }, () => {
  it('is restarted after a backoff; meanwhile its calls fail at once, naming it; then they work again', async () => {
    const clock = manualClock();
    const { logger, lines } = captureLogger();
    const mcp = await connect({ std: stdioServer }, { logger, clock });
    const executor = executorFor(mcp.tools, ['std.add']);
    const first = mcp.servers[0]?.pid as number;
    process.kill(first, 'SIGKILL');

    const wait = await scheduledWait(clock);
    expect(wait).toBeGreaterThanOrEqual(800);
    expect(wait).toBeLessThanOrEqual(1000);
    const down = await call(executor, 'std.add', { a: 1, b: 2 });
    expect(down).toMatchObject({ ok: false, error: { code: 'failed' } });
    expect(down.output).toMatch(
      new RegExp(
        `^std\\.add failed: ${who} is gone: its process was killed by SIGKILL at ${clockTime}; ` +
          'restarting it \\(attempt 1, next try in \\d+ (ms|s)\\)',
      ),
    );
    expect(lines.find((line) => line.msg === 'MCP server disconnected; restarting it')).toMatchObject({
      level: 40,
      mcpServer: 'std',
      reason: 'its process was killed by SIGKILL',
      attempt: 1,
    });

    clock.fire();
    await expect.poll(() => lines.some((line) => line.msg === 'MCP server restarted'), slow).toBe(true);
    expect(mcp.servers[0]?.pid).toBeTypeOf('number');
    expect(mcp.servers[0]?.pid).not.toBe(first);
    expect(await call(executor, 'std.add', { a: 2, b: 2 })).toMatchObject({ ok: true, output: '2+2=4' });
    expect(lines.filter((line) => line.msg === 'restarting MCP server')).toEqual([
      expect.objectContaining({ level: 40, mcpServer: 'std', attempt: 1 }),
    ]);
  });

  it('fails the call it was serving, saying it died mid-call, with its exit code and stderr', async () => {
    const clock = manualClock();
    const mcp = await connect({ std: stdioServer }, { clock });
    const result = await call(executorFor(mcp.tools, ['std.exit']), 'std.exit', { code: 7 });
    expect(result).toMatchObject({ ok: false, error: { code: 'failed' } });
    expect(result.output).toMatch(
      new RegExp(
        `^std\\.exit failed: ${who} died mid-call: its process exited with code 7 at ${clockTime}; ` +
          'restarting it \\(attempt 1, next try in \\d+ (ms|s)\\); ' +
          'stderr: test MCP server exiting on purpose with code 7',
      ),
    );
  });

  it('keeps backing off while it keeps dying, and its calls fail fast meanwhile', {
    timeout: 120_000,
  }, async () => {
    const marker = join(tmpdir(), `troupe-mcp-crash-${randomUUID()}`);
    markers.push(marker);
    const clock = manualClock();
    const { logger, lines } = captureLogger();
    const mcp = await connect(
      { std: { ...stdioServer, args: [...(stdioServer.args ?? []), '--crash-if', marker] } },
      { logger, clock },
    );
    const executor = executorFor(mcp.tools, ['std.add']);
    await writeFile(marker, 'crash');
    process.kill(mcp.servers[0]?.pid as number, 'SIGKILL');

    for (let attempt = 1; attempt <= 4; attempt += 1) {
      const wait = await scheduledWait(clock);
      const nominal = 1000 * 2 ** (attempt - 1);
      expect(wait).toBeGreaterThanOrEqual(nominal * 0.8);
      expect(wait).toBeLessThanOrEqual(nominal);
      if (attempt > 1) {
        const started = performance.now();
        const result = await call(executor, 'std.add', { a: 1, b: 1 });
        expect(performance.now() - started).toBeLessThan(2_000);
        expect(result.output).toMatch(
          new RegExp(
            `^std\\.add failed: ${who} is gone: its process exited with code 3 at ${clockTime}, during restart ` +
              `attempt ${attempt - 1}; restarting it \\(attempt ${attempt}, next try in \\d+ m?s\\); ` +
              'stderr: test MCP server crashed on purpose',
          ),
        );
      }
      clock.fire();
    }
    await scheduledWait(clock);
    const failed = lines.filter((line) => line.msg === 'MCP server restart failed; trying again later');
    expect(failed.map((line) => [line.attempt, line.exit])).toEqual([
      [1, 'exited with code 3'],
      [2, 'exited with code 3'],
      [3, 'exited with code 3'],
      [4, 'exited with code 3'],
    ]);
    expect(failed.every((line) => line.level === 40 && line.mcpServer === 'std')).toBe(true);

    await rm(marker);
    clock.fire();
    await expect.poll(() => lines.some((line) => line.msg === 'MCP server restarted'), slow).toBe(true);
    expect(await call(executor, 'std.add', { a: 3, b: 4 })).toMatchObject({ ok: true, output: '3+4=7' });
    expect(lines.filter((line) => line.msg === 'restarting MCP server').map((line) => line.attempt)).toEqual([
      1, 2, 3, 4, 5,
    ]);
  });

  it('lists the tools again after a restart, and fails calls of a tool the server no longer offers', async () => {
    const marker = join(tmpdir(), `troupe-mcp-no-env-${randomUUID()}`);
    markers.push(marker);
    const clock = manualClock();
    const { logger, lines } = captureLogger();
    const mcp = await connect(
      { std: { ...stdioServer, args: [...(stdioServer.args ?? []), '--without-env-if', marker] } },
      { logger, clock },
    );
    const executor = executorFor(mcp.tools, ['std.add', 'std.env']);
    await writeFile(marker, 'no env');
    process.kill(mcp.servers[0]?.pid as number, 'SIGKILL');
    await scheduledWait(clock);
    clock.fire();
    await expect.poll(() => lines.some((line) => line.msg === 'MCP server restarted'), slow).toBe(true);

    const result = await call(executor, 'std.env', { name: 'PATH' });
    expect(result).toMatchObject({ ok: false, error: { code: 'failed' } });
    expect(result.output).toMatch(
      new RegExp(
        `^std\\.env failed: ${who} no longer offers tool env since it was restarted at ${clockTime}; ` +
          'it offers: add, exit$',
      ),
    );
    expect(lines.find((line) => line.msg.includes('no longer offers'))).toMatchObject({
      level: 40,
      mcpServer: 'std',
      vanished: ['env'],
    });
    expect(await call(executor, 'std.add', { a: 1, b: 1 })).toMatchObject({ ok: true, output: '1+1=2' });
  });

  it('close() during a backoff clears the pending restart and refuses later calls', async () => {
    const clock = manualClock();
    const { logger, lines } = captureLogger();
    const mcp = await connect({ std: stdioServer }, { logger, clock });
    const executor = executorFor(mcp.tools, ['std.add']);
    process.kill(mcp.servers[0]?.pid as number, 'SIGKILL');
    await scheduledWait(clock);

    await mcp.close();
    expect(clock.pending()).toEqual([]);
    const result = await call(executor, 'std.add', { a: 1, b: 1 });
    expect(result.output).toMatch(
      new RegExp(`^std\\.add failed: ${who} is closed: .*; it will not be restarted$`),
    );
    expect(lines.some((line) => line.msg === 'restarting MCP server')).toBe(false);
  });

  it('close() while a restart is under way ends the new process too', async () => {
    const clock = manualClock();
    const mcp = await connect({ std: stdioServer }, { clock });
    const first = mcp.servers[0]?.pid as number;
    process.kill(first, 'SIGKILL');
    await scheduledWait(clock);
    clock.fire();
    await expect.poll(() => mcp.servers[0]?.pid, slow).toBeTypeOf('number');
    const second = mcp.servers[0]?.pid as number;
    expect(second).not.toBe(first);

    await mcp.close();
    expect(processExists(second)).toBe(false);
    expect(clock.pending()).toEqual([]);
  });
});
