import { builtinTools, ConfigError, type LoadedPipeline, loadPipeline, runTask } from '@troupe/coordinator';
import { checkTaskInput, type TaskSubmission, type TroupeEvent } from '@troupe/protocol';
import { CliError } from '../cliError.ts';
import { formatEvent } from '../format/formatEvent.ts';
import { exitCodeOf } from '../taskEnding.ts';
import { formatTaskResult, taskResultOf } from '../taskResult.ts';
import { checkedTask, newTaskId } from '../taskToSubmit.ts';
import { workspacesRoot } from '../taskWorkspaces.ts';
import { importToolModule } from '../toolModuleImport.ts';

export interface RunOptions {
  id?: string;
  input?: string;
  json: boolean;
  /** Approve every call an `ask` rule would ask a person about (there is none to ask). */
  yes: boolean;
  home?: string;
  /** Where the task's workspace goes (`<dir>/<pipeline>/<taskId>`); `<home>/workspaces` by default. */
  workspaces?: string;
  allowMcpCommands: boolean;
}

/** Said first, on stderr, every time: a user must not take this for `troupe up`'s guarantees. */
export const NOT_DURABLE_WARNING = 'troupe run: in-process, nothing is stored; a crash loses this task';

/**
 * `troupe run`: one task of a pipeline file, run in this process with no server (no NATS, nothing stored), for
 * tests, evals and scripts. It prints the task's events as `troupe tail` does and its result as `troupe submit
 * --wait` does, and exits as that does: 0 completed, 1 failed or cancelled. Ctrl-C cancels the task.
 */
export async function run(file: string, goal: string, options: RunOptions): Promise<number> {
  process.stderr.write(`${NOT_DURABLE_WARNING}\n`);
  const task = buildTask(goal, options);
  const pipeline = await load(file, options);
  // As troupe submit checks it before it submits: the runner would refuse the task, and run none of it.
  const schema = pipeline.config.input;
  const fits = schema === undefined ? undefined : checkTaskInput(schema, task.input);
  if (fits !== undefined && !fits.ok)
    throw new CliError(`the input does not fit pipeline ${pipeline.config.name}: ${fits.reason}`, 2);
  const abort = new AbortController();
  const cancel = () => abort.abort();
  process.once('SIGINT', cancel);
  process.once('SIGTERM', cancel);
  try {
    const workspaceRoot = workspacesRoot(options);
    const { final } = await runTask({
      pipeline,
      goal: task.goal,
      ...(task.input === undefined ? {} : { input: task.input }),
      taskId: task.id,
      workspaceRoot,
      approvals: options.yes ? 'allow' : 'deny',
      signal: abort.signal,
      onEvent: (event) => print(event, options.json),
    });
    // No value store here: an output is whole in its final event.
    const result = await taskResultOf(undefined, final, { workspaces: workspaceRoot });
    process.stdout.write(options.json ? `${JSON.stringify(result)}\n` : formatTaskResult(result));
    return exitCodeOf(final.kind);
  } finally {
    process.off('SIGINT', cancel);
    process.off('SIGTERM', cancel);
  }
}

function buildTask(goal: string, options: RunOptions): TaskSubmission & { id: string } {
  let input: unknown;
  if (options.input !== undefined) {
    try {
      input = JSON.parse(options.input);
    } catch (error) {
      throw new CliError(`--input is not JSON: ${(error as Error).message}`, 2);
    }
  }
  return checkedTask({ id: options.id ?? newTaskId(), goal, ...(input === undefined ? {} : { input }) });
}

/** The pipeline file, loaded as `troupe up` loads it; a bad one is refused with its problems (exit 2). */
async function load(file: string, options: RunOptions): Promise<LoadedPipeline> {
  try {
    return await loadPipeline(file, {
      toolNames: builtinTools().names(),
      importModule: importToolModule,
      allowMcpCommands: options.allowMcpCommands || process.env.TROUPE_ALLOW_MCP_COMMANDS === '1',
    });
  } catch (error) {
    if (error instanceof ConfigError) throw new CliError(error.message, 2);
    throw error;
  }
}

function print(event: TroupeEvent, json: boolean): void {
  process.stdout.write(
    `${json ? JSON.stringify(event) : formatEvent(event, { color: process.stdout.isTTY })}\n`,
  );
}
