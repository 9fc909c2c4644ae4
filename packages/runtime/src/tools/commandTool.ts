import { errorMessage } from '@troupe/protocol';
import { z } from 'zod';
import type { Sandbox, SandboxResult } from '../sandbox/sandbox.ts';
import { selectSandbox } from '../sandbox/selectSandbox.ts';
import { defineTool, type Tool } from './tool.ts';
import { ToolError } from './toolError.ts';

const maxTimeoutSeconds = 600;
const defaultTimeoutSeconds = 120;

/** Options of `createCommandTool`. */
export interface CommandToolOptions {
  /** Each of stdout and stderr is kept up to this many bytes; 32 KiB by default. */
  maxOutputBytes?: number;
  /** Variables added to the sandbox's minimal environment. */
  env?: Record<string, string>;
}

const RunCommandInput = z.object({
  command: z.string().min(1).describe('Shell command, run with sh -c in the workspace directory'),
  timeoutSeconds: z
    .number()
    .int()
    .min(1)
    .max(maxTimeoutSeconds)
    .optional()
    .describe(
      `Kill the command after this many seconds; ${defaultTimeoutSeconds} by default, at most ${maxTimeoutSeconds}`,
    ),
});

/**
 * Builds `run_command` on a given sandbox, or on one chosen when the first command runs. A non-zero exit is a
 * result the model reads, not an error; network access is granted only by a policy rule with `network: true`.
 *
 * @example
 * const tool = createCommandTool(await selectSandbox({ prefer: 'process' }));
 */
export function createCommandTool(
  sandbox: Sandbox | (() => Promise<Sandbox>),
  opts: CommandToolOptions = {},
): Tool<z.infer<typeof RunCommandInput>> {
  const getSandbox = typeof sandbox === 'function' ? sandbox : async () => sandbox;
  const maxOutputBytes = opts.maxOutputBytes ?? 32 * 1024;
  return defineTool({
    name: 'run_command',
    description: `Run a shell command (sh -c) in the workspace directory, in a sandbox with a minimal environment (HOME is the workspace). Returns the exit code, stdout and stderr (each cut at ${maxOutputBytes} bytes); a non-zero exit code is reported, not an error. Network access depends on the agent's permissions. Commands are killed after timeoutSeconds (default ${defaultTimeoutSeconds}).`,
    input: RunCommandInput,
    // Our own timer fires first and reports the kill in the output; the executor's is a backstop.
    timeoutMs: (maxTimeoutSeconds + 15) * 1000,
    async run({ command, timeoutSeconds = defaultTimeoutSeconds }, ctx) {
      const chosen = await getSandbox();
      let result: SandboxResult;
      try {
        result = await chosen.run({
          command,
          cwd: ctx.workspace,
          timeoutMs: timeoutSeconds * 1000,
          network: ctx.rule?.network === true,
          ...(opts.env ? { env: opts.env } : {}),
          maxOutputBytes,
          signal: ctx.signal,
        });
      } catch (cause) {
        if (ctx.signal.aborted) throw ctx.signal.reason;
        const reason = errorMessage(cause);
        throw new ToolError('failed', `run_command could not start the ${chosen.kind} sandbox: ${reason}`, {
          cause,
        });
      }
      return formatResult(result, timeoutSeconds, maxOutputBytes);
    },
  });
}

function formatResult(result: SandboxResult, timeoutSeconds: number, maxOutputBytes: number): string {
  const exit = result.exitCode ?? `none (killed by ${result.signal ?? 'a signal'})`;
  const lines = [
    `exit code ${exit} (sandbox: ${result.sandbox})`,
    '--- stdout ---',
    result.stdout.replace(/\n$/, ''),
    '--- stderr ---',
    result.stderr.replace(/\n$/, ''),
  ];
  if (result.truncated) lines.push(`[output truncated: each stream is cut at ${maxOutputBytes} bytes]`);
  if (result.timedOut) lines.push(`[timed out after ${timeoutSeconds} s; the process group was killed]`);
  return lines.join('\n');
}

/** `run_command` on the strongest sandbox that works here, chosen (and probed) on its first call. */
export const runCommandTool = createCommandTool(() => selectSandbox());
