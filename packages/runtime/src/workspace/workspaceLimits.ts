import { MAX_WORKSPACE_FILES } from '@troupe/protocol';

const MIB = 1024 * 1024;

/** How much of a task's workspace is handed on between steps and hosts; past a limit, the step fails saying so. */
export interface WorkspaceLimits {
  /** Largest file, in bytes. */
  maxFileBytes: number;
  /** Largest total of the task's files, in bytes. */
  maxTaskBytes: number;
  /** Most files. */
  maxFiles: number;
}

export const DEFAULT_WORKSPACE_LIMITS: WorkspaceLimits = {
  maxFileBytes: 64 * MIB,
  maxTaskBytes: 512 * MIB,
  maxFiles: MAX_WORKSPACE_FILES,
};

/**
 * The limits `TROUPE_WORKSPACE_MAX_FILE_MIB` and `TROUPE_WORKSPACE_MAX_TASK_MIB` set, else the defaults. A value that
 * is not a positive number stops the start with a message naming it, rather than handing on more or less than meant.
 */
export function workspaceLimitsFromEnv(env: NodeJS.ProcessEnv = process.env): WorkspaceLimits {
  const mib = (name: string, fallback: number): number => {
    const raw = env[name];
    if (raw === undefined || raw === '') return fallback;
    const value = Number(raw);
    if (!Number.isFinite(value) || value <= 0) {
      throw new Error(`${name} must be a positive number of MiB, not ${JSON.stringify(raw)}`);
    }
    return Math.floor(value * MIB);
  };
  return {
    maxFileBytes: mib('TROUPE_WORKSPACE_MAX_FILE_MIB', DEFAULT_WORKSPACE_LIMITS.maxFileBytes),
    maxTaskBytes: mib('TROUPE_WORKSPACE_MAX_TASK_MIB', DEFAULT_WORKSPACE_LIMITS.maxTaskBytes),
    maxFiles: DEFAULT_WORKSPACE_LIMITS.maxFiles,
  };
}

/** A task's workspace past a limit: its step fails `workspace_too_large` with this message. */
export class WorkspaceLimitError extends Error {
  override readonly name = 'WorkspaceLimitError';
  readonly code = 'workspace_too_large';
}
