import { tmpdir } from 'node:os';
import type { ToolResult } from '@troupe/protocol';
import { TEST_MCP_STDIO_SERVER } from '@troupe/testkit';
import type { Clock } from '../../src/events/clock.ts';
import { createLogger, type Logger } from '../../src/logging/index.ts';
import type { McpStdioServerConfig } from '../../src/mcp/mcpConfig.ts';
import { connectMcpServers, type McpConnections } from '../../src/mcp/mcpToolSource.ts';
import type { Tool } from '../../src/tools/tool.ts';
import { ToolExecutor } from '../../src/tools/toolExecutor.ts';
import { ToolRegistry } from '../../src/tools/toolRegistry.ts';

// Node 20 runs the TypeScript server through tsx; the child resolves `tsx` from the repo root, its cwd.
/** The testkit's stdio server (`add`, `env`, `exit`). */
export const stdioServer: McpStdioServerConfig = {
  transport: 'stdio',
  command: process.execPath,
  args: ['--import', 'tsx', TEST_MCP_STDIO_SERVER],
  timeout: 20,
};

export interface LogLine {
  level: number;
  msg: string;
  [key: string]: unknown;
}

/** A debug logger whose lines land in `lines`, parsed. */
export function captureLogger(): { logger: Logger; lines: LogLine[] } {
  const lines: LogLine[] = [];
  const logger = createLogger({
    level: 'debug',
    name: 'test',
    destination: { write: (line: string) => void lines.push(JSON.parse(line) as LogLine) },
  });
  return { logger, lines };
}

/** An executor over `tools` for an agent that declares `declared`. */
export function executorFor(tools: readonly Tool[], declared: readonly string[]): ToolExecutor {
  const registry = new ToolRegistry();
  for (const tool of tools) registry.register(tool);
  return new ToolExecutor({
    registry,
    policy: { tools: declared, rules: [] },
    agent: 'tester',
    workspace: tmpdir(),
    taskId: 'task-mcp',
  });
}

let nextId = 0;

/** Runs one call the way the agent actor would, with the arguments as the model's JSON text. */
export function call(
  executor: ToolExecutor,
  name: string,
  args: unknown,
  signal?: AbortSignal,
): Promise<ToolResult> {
  nextId += 1;
  return executor.execute({ id: `call-${nextId}`, name, arguments: JSON.stringify(args) }, signal);
}

/** Resolves once `predicate` holds, polling; fails after `timeoutMs`. */
export async function eventually(predicate: () => boolean, timeoutMs = 3_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** What a promise rejected with; fails when it resolved. */
export async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected a rejection, but the promise resolved');
}

/** True while a process with this id exists. */
export function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** A restart clock whose timers run only when the test fires them, and whose time moves only when it advances it. */
export interface ManualClock extends Clock {
  /** The waits asked for that have neither fired nor been cleared, in milliseconds. */
  pending(): number[];
  /** Runs every pending timer now. */
  fire(): void;
  /** Moves `now()` forward. */
  advance(ms: number): void;
}

export function manualClock(): ManualClock {
  const timers = new Map<number, { fn: () => void; ms: number }>();
  let next = 0;
  let now = Date.now();
  return {
    now: () => now,
    setTimeout(fn, ms) {
      next += 1;
      timers.set(next, { fn, ms });
      return next;
    },
    clearTimeout(handle) {
      timers.delete(handle as number);
    },
    pending: () => [...timers.values()].map((timer) => timer.ms),
    fire() {
      const due = [...timers.values()];
      timers.clear();
      for (const timer of due) timer.fn();
    },
    advance(ms) {
      now += ms;
    },
  };
}

/**
 * `connect` opens MCP connections for a test and remembers them; `closeAll` (in `afterEach`) closes them, so no
 * server process outlives its test.
 */
export function trackedConnections() {
  const open: McpConnections[] = [];
  return {
    async connect(...args: Parameters<typeof connectMcpServers>): Promise<McpConnections> {
      const connections = await connectMcpServers(...args);
      open.push(connections);
      return connections;
    },
    closeAll: () => Promise.all(open.splice(0).map((connections) => connections.close())),
  };
}
