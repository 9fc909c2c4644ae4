import { spawn } from 'node:child_process';

/** How to run one child process as the leader of its own process group. */
export interface ProcessGroupOptions {
  cwd: string;
  /** The child's whole environment. */
  env: Record<string, string>;
  timeoutMs: number;
  maxOutputBytes: number;
  signal: AbortSignal;
}

/** How the group's leader ended and what it printed. */
export interface ProcessGroupResult {
  exitCode: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  truncated: boolean;
}

// After the leader exits, how long a straggler that left the group may hold stdout or stderr open.
const pipeGraceMs = 1000;

/**
 * Runs `file` with `args` in a new process group and kills the whole group with SIGKILL on timeout, on abort, and
 * when the leader exits, so nothing it started in the background outlives it. Rejects with the abort reason when
 * aborted, and with the spawn error when the program cannot start.
 */
export function runProcessGroup(
  file: string,
  args: readonly string[],
  opts: ProcessGroupOptions,
): Promise<ProcessGroupResult> {
  const { signal } = opts;
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, {
      cwd: opts.cwd,
      env: opts.env,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const stdout = new CappedOutput(opts.maxOutputBytes);
    const stderr = new CappedOutput(opts.maxOutputBytes);
    child.stdout.on('data', (chunk: Buffer) => stdout.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => stderr.push(chunk));

    let timedOut = false;
    let settled = false;
    let graceTimer: NodeJS.Timeout | undefined;
    const killGroup = () => {
      if (child.pid === undefined) return;
      try {
        // A negative pid addresses the process group, so grandchildren die with the shell.
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        // ESRCH: the group is already gone.
      }
    };
    const timer = setTimeout(() => {
      timedOut = true;
      killGroup();
    }, opts.timeoutMs);
    signal.addEventListener('abort', killGroup, { once: true });
    const finish = (outcome: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      clearTimeout(graceTimer);
      signal.removeEventListener('abort', killGroup);
      outcome();
    };

    child.once('error', (error) => finish(() => reject(error)));
    child.once('exit', () => {
      killGroup();
      graceTimer = setTimeout(() => {
        child.stdout.destroy();
        child.stderr.destroy();
      }, pipeGraceMs);
    });
    child.once('close', (exitCode, exitSignal) =>
      finish(() => {
        if (signal.aborted) {
          reject(signal.reason);
          return;
        }
        resolve({
          exitCode,
          signal: exitSignal,
          stdout: stdout.text(),
          stderr: stderr.text(),
          timedOut,
          truncated: stdout.truncated || stderr.truncated,
        });
      }),
    );
  });
}

/** Keeps the first `maxBytes` of a stream; later bytes are counted as dropped so the child never blocks on a full pipe. */
class CappedOutput {
  readonly #maxBytes: number;
  readonly #chunks: Buffer[] = [];
  #kept = 0;
  truncated = false;

  constructor(maxBytes: number) {
    this.#maxBytes = maxBytes;
  }

  push(chunk: Buffer): void {
    const room = this.#maxBytes - this.#kept;
    if (chunk.length > room) this.truncated = true;
    if (room <= 0) return;
    const kept = chunk.length > room ? chunk.subarray(0, room) : chunk;
    this.#chunks.push(kept);
    this.#kept += kept.length;
  }

  text(): string {
    // In stream mode the decoder holds back a character the cap split, rather than end on U+FFFD.
    return new TextDecoder().decode(Buffer.concat(this.#chunks), { stream: this.truncated });
  }
}
