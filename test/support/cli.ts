import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { repoRoot } from './harness.ts';

const bin = join(repoRoot, 'apps', 'cli', 'bin', 'troupe.mjs');

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** How a CLI child connects to NATS: none of these is taken from this process's environment. */
const NATS_ENV = [
  'NATS_URL',
  'NATS_CREDS',
  'NATS_USER',
  'NATS_PASSWORD',
  'NATS_NKEY',
  'NATS_CA',
  'NATS_CERT',
  'NATS_KEY',
  'TROUPE_INBOX',
  'TROUPE_PIPELINES',
];

/** The environment for CLI children: this one's, minus how to reach NATS unless given. */
export function cliEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([key]) => !NATS_ENV.includes(key)));
  return { ...env, TROUPE_LOG_LEVEL: 'warn', ...extra };
}

/** Runs `troupe <args>` to completion, in `cwd` (the repository by default), with `stdin` as its standard input. */
export function troupe(
  args: string[],
  env = cliEnv(),
  timeoutMs = 30_000,
  cwd = repoRoot,
  stdin?: string,
): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [bin, ...args], {
      cwd,
      env,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    // Nothing given: standard input is at its end at once, as /dev/null is.
    child.stdin.end(stdin ?? '');
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`troupe ${args.join(' ')} did not finish in ${timeoutMs} ms\n${stdout}\n${stderr}`));
    }, timeoutMs);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** A long-running `troupe` process and its output so far. */
export interface CliProcess {
  child: ChildProcess;
  output(): string;
  /** Resolves once the combined output matches. */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<void>;
  /** Sends a signal and resolves with the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
  /** Resolves with the exit code once the process has ended by itself. */
  exited(): Promise<number | null>;
}

export function startTroupe(args: string[], env = cliEnv(), cwd = repoRoot): CliProcess {
  const child = spawn(process.execPath, [bin, ...args], {
    cwd,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const waiters = new Set<() => void>();
  const onData = (chunk: Buffer) => {
    output += chunk.toString();
    for (const waiter of waiters) waiter();
  };
  child.stdout?.on('data', onData);
  child.stderr?.on('data', onData);
  const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
  return {
    child,
    output: () => output,
    waitFor: (pattern, timeoutMs = 30_000) =>
      new Promise((resolve, reject) => {
        const check = () => {
          if (!pattern.test(output)) return;
          waiters.delete(check);
          clearTimeout(timer);
          resolve();
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`timed out waiting for ${pattern} in:\n${output}`));
        }, timeoutMs);
        waiters.add(check);
        check();
      }),
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null) child.kill(signal);
      return exited;
    },
    exited: () => exited,
  };
}
