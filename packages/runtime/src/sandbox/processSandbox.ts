import { runProcessGroup } from './processGroup.ts';
import { limitedShellArgs, minimalEnv, type ResourceLimits, type Sandbox } from './sandbox.ts';

/** Options of the fallback sandbox. */
export interface ProcessSandboxOptions {
  limits?: ResourceLimits;
}

/**
 * The fallback sandbox: `/bin/sh -c` in its own process group, in the workspace, with only the minimal environment
 * (never the parent's, so API keys stay out) and `ulimit` limits; timeout and abort kill the whole group. It cannot
 * block network access or reads outside the workspace; results say `sandbox: 'process'` so callers can tell.
 *
 * @example
 * const result = await createProcessSandbox().run({
 *   command: 'npm test', cwd: '/srv/task-42', timeoutMs: 60_000, network: false, maxOutputBytes: 32_768, signal,
 * });
 */
export function createProcessSandbox(opts: ProcessSandboxOptions = {}): Sandbox {
  return {
    kind: 'process',
    async run(run) {
      const result = await runProcessGroup(
        '/bin/sh',
        limitedShellArgs(run.command, run.timeoutMs, opts.limits),
        {
          cwd: run.cwd,
          env: minimalEnv(run.cwd, run.env),
          timeoutMs: run.timeoutMs,
          maxOutputBytes: run.maxOutputBytes,
          signal: run.signal,
        },
      );
      return { ...result, sandbox: 'process' };
    },
  };
}
