import type { ProcessGroupResult } from './processGroup.ts';
/** Which kind of confinement ran a command. */
export type SandboxKind = 'bubblewrap' | 'process';

/** One command to run in a sandbox. */
export interface SandboxRunOptions {
  /** Shell text, run with `sh -c`. */
  command: string;
  /** Absolute path of the workspace: the command's working directory and, under bubblewrap, its only writable place. */
  cwd: string;
  /** After this long the command's whole process tree is killed and the result says `timedOut`. */
  timeoutMs: number;
  /** Let the command reach the network; only bubblewrap can withhold it. */
  network: boolean;
  /** Added to the minimal environment; the parent's environment never reaches the command. */
  env?: Record<string, string>;
  /** Each of stdout and stderr is kept up to this many bytes; the rest is read and dropped. */
  maxOutputBytes: number;
  /** Aborting kills the command's process tree; `run` then rejects with the signal's reason. */
  signal: AbortSignal;
}

/** How a command ended, what it printed (either stream cut at `maxOutputBytes` sets `truncated`), and where it ran. */
export interface SandboxResult extends ProcessGroupResult {
  sandbox: SandboxKind;
}

/**
 * Runs shell commands confined to a workspace. `bubblewrap` isolates the file system and network; `process` (the
 * fallback) only scrubs the environment, sets resource limits and kills the process group: it cannot block network
 * access or reads outside the workspace, and says so by its `kind`.
 */
export interface Sandbox {
  readonly kind: SandboxKind;
  run(opts: SandboxRunOptions): Promise<SandboxResult>;
}

/** Per-process resource limits applied with `ulimit` before the command starts. */
export interface ResourceLimits {
  /** CPU seconds per process; the run's timeout (rounded up) by default. */
  cpuSeconds?: number;
  /** Address space per process in KiB; 4 GiB by default. */
  virtualMemoryKiB?: number;
  /** Largest file a process may write, in KiB; 1 GiB by default. */
  fileSizeKiB?: number;
}

const defaultVirtualMemoryKiB = 4 * 1024 * 1024;
const defaultFileSizeKiB = 1024 * 1024;

/** The whole environment a sandboxed command sees: a fixed PATH, HOME in the workspace, a UTF-8 locale, and `extra`. */
export function minimalEnv(workspace: string, extra: Record<string, string> = {}): Record<string, string> {
  return { PATH: '/usr/local/bin:/usr/bin:/bin', HOME: workspace, LANG: 'C.UTF-8', ...extra };
}

/**
 * `sh -c` arguments that set the limits and then exec the command in a fresh shell. The command travels as `$1`, not
 * spliced into the script, so it needs no quoting and its error messages keep their line numbers.
 */
export function limitedShellArgs(command: string, timeoutMs: number, limits: ResourceLimits = {}): string[] {
  const cpu = wholePositive(limits.cpuSeconds ?? Math.ceil(timeoutMs / 1000), 'cpuSeconds');
  const memory = wholePositive(limits.virtualMemoryKiB ?? defaultVirtualMemoryKiB, 'virtualMemoryKiB');
  const fileSize = wholePositive(limits.fileSizeKiB ?? defaultFileSizeKiB, 'fileSizeKiB');
  // A limit above an existing hard limit fails; the existing one is stricter, so the error is dropped.
  // POSIX `ulimit -f` counts 512-byte blocks; `-v` is in KiB.
  const prelude = [`ulimit -t ${cpu}`, `ulimit -v ${memory}`, `ulimit -f ${fileSize * 2}`]
    .map((line) => `${line} 2>/dev/null`)
    .join('; ');
  return ['-c', `${prelude}; exec /bin/sh -c "$1"`, 'sh', command];
}

// The values are spliced into shell text, so only plain integers get through.
function wholePositive(value: number, name: string): number {
  const whole = Math.max(1, Math.ceil(value));
  if (!Number.isSafeInteger(whole))
    throw new RangeError(`resource limit ${name} must be a positive integer, got ${value}`);
  return whole;
}
