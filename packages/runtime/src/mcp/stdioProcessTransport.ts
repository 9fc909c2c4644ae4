import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { ReadBuffer, serializeMessage } from '@modelcontextprotocol/sdk/shared/stdio.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { withTimeout } from '../withTimeout.ts';

/** How to start a stdio MCP server. `env` is the child's whole environment: nothing else is inherited. */
export interface StdioLaunch {
  command: string;
  args: readonly string[];
  env: Readonly<Record<string, string>>;
  cwd?: string;
  /** Each line the server writes to stderr. */
  onStderrLine?: (line: string) => void;
  /** How long `close()` waits after each step (stdin closed, SIGTERM) before the next; 2000 ms by default. */
  graceMs?: number;
}

const stderrTailLines = 20;

/**
 * An MCP client transport over a child process's stdin and stdout. Unlike the SDK's own, it hands the child exactly
 * the environment it is given, so no coordinator secret reaches a server by accident.
 */
export class StdioProcessTransport implements Transport {
  onclose?: (() => void) | undefined;
  onerror?: ((error: Error) => void) | undefined;
  onmessage?: (<T extends JSONRPCMessage>(message: T) => void) | undefined;

  readonly #launch: StdioLaunch;
  readonly #buffer = new ReadBuffer();
  readonly #stderrTail: string[] = [];
  #child: ChildProcessWithoutNullStreams | undefined;
  #exit: string | undefined;

  constructor(launch: StdioLaunch) {
    this.#launch = launch;
  }

  /** The child's process id once started. */
  get pid(): number | undefined {
    return this.#child?.pid;
  }

  /** How the child ended (`exited with code 1`, `killed by SIGTERM`), once it has. */
  get exit(): string | undefined {
    return this.#exit;
  }

  /** The last lines the child wrote to stderr. */
  get stderrTail(): string {
    return this.#stderrTail.join('\n');
  }

  start(): Promise<void> {
    if (this.#child) return Promise.reject(new Error('this stdio transport was already started'));
    const { command, args, env, cwd } = this.#launch;
    const child = spawn(command, args, { env, stdio: 'pipe', ...(cwd === undefined ? {} : { cwd }) });
    this.#child = child;
    child.stdout.on('data', (chunk: Buffer) => this.#receive(chunk));
    child.stderr.setEncoding('utf8');
    let partial = '';
    child.stderr.on('data', (text: string) => {
      const lines = (partial + text).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) this.#stderrLine(line);
    });
    child.stderr.on('end', () => {
      if (partial !== '') this.#stderrLine(partial);
    });
    // A child that dies mid-write makes stdin emit EPIPE; the close that follows is what matters.
    child.stdin.on('error', (error) => this.onerror?.(error));
    child.on('exit', (code, signal) => {
      this.#exit = signal === null ? `exited with code ${code}` : `killed by ${signal}`;
    });
    child.on('close', () => this.onclose?.());
    return new Promise((resolve, reject) => {
      child.once('spawn', () => resolve());
      // Kept for the child's whole life: an 'error' event without a listener would crash the coordinator.
      child.on('error', (error) => {
        reject(error);
        this.onerror?.(error);
      });
    });
  }

  send(message: JSONRPCMessage): Promise<void> {
    const stdin = this.#child?.stdin;
    if (!stdin || stdin.destroyed || this.#exit !== undefined) {
      return Promise.reject(new Error('the MCP server process is not running'));
    }
    return new Promise((resolve, reject) => {
      stdin.write(serializeMessage(message), (error) => (error ? reject(error) : resolve()));
    });
  }

  /** Ends the child: closes its stdin, then SIGTERM, then SIGKILL, each after a grace period; resolves once it is gone. */
  async close(): Promise<void> {
    const child = this.#child;
    // Nothing to end: never started, failed to spawn (no pid), or already exited.
    if (!child?.pid || child.exitCode !== null || child.signalCode !== null) return;
    const grace = this.#launch.graceMs ?? 2000;
    const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.stdin.end();
    if ((await withTimeout(gone, grace)) !== 'timeout') return;
    child.kill('SIGTERM');
    if ((await withTimeout(gone, grace)) !== 'timeout') return;
    child.kill('SIGKILL');
    await gone;
  }

  #receive(chunk: Buffer): void {
    try {
      this.#buffer.append(chunk);
    } catch (error) {
      // One message beyond the buffer's limit: the stream cannot be resynchronised, so the server is stopped.
      this.onerror?.(error instanceof Error ? error : new Error(String(error)));
      void this.close();
      return;
    }
    for (;;) {
      let message: JSONRPCMessage | null;
      try {
        message = this.#buffer.readMessage();
      } catch (error) {
        // A line that is not JSON-RPC (a server logging to stdout) is reported and skipped.
        this.onerror?.(error instanceof Error ? error : new Error(String(error)));
        continue;
      }
      if (message === null) return;
      this.onmessage?.(message);
    }
  }

  #stderrLine(line: string): void {
    this.#stderrTail.push(line);
    if (this.#stderrTail.length > stderrTailLines) this.#stderrTail.shift();
    this.#launch.onStderrLine?.(line);
  }
}
