import { builtinTools, ConfigError, loadPipeline, type RunFact, replayTask } from '@troupe/coordinator';
import { errorMessage, type TroupeEvent } from '@troupe/protocol';
import { StepJournal, ValueStore } from '@troupe/runtime';
import { exitWhenStdoutCloses } from '../closedPipe.ts';
import { taskHistory } from '../eventFeed.ts';
import { findPipelineFile } from '../pipelineFile.ts';
import { CliError, checkTaskId, connectCli, type ServerOptions } from '../server.ts';
import { importToolModule } from '../toolModuleImport.ts';

export interface ReplayCommandOptions extends ServerOptions {
  /** The file to replay against; without it, the one file in this directory that declares the task's pipeline. */
  pipeline?: string;
  /** False with `--no-tools`: calls answer from the record. */
  tools: boolean;
  json: boolean;
  /** Let the pipeline's stdio MCP servers be started, for their tools to run again. */
  allowMcpCommands: boolean;
}

/**
 * `troupe replay`: runs a recorded task again, offline, against its pipeline file (or an edited one) — model replies
 * from the task's events (made whole from the step journal where an event kept only their start), tools run again
 * in a fresh workspace — and reports the first point where the new
 * run does something else than the recorded one. Exit 0 when they match, 1 when they diverge.
 */
export async function replay(taskId: string, options: ReplayCommandOptions): Promise<number> {
  checkTaskId(taskId);
  exitWhenStdoutCloses();
  let result: Awaited<ReturnType<typeof replayTask>>;
  let file = options.pipeline;
  // A file given is checked before anything connects.
  let pipeline = file === undefined ? undefined : await load(file, options);
  const bus = await connectCli(options, 'troupe-replay');
  try {
    const events = await taskHistory(bus, taskId);
    if (events.length === 0) throw new CliError(`no events of task ${taskId} are kept on this server`);
    if (file === undefined || pipeline === undefined) {
      file = await findPipelineFile((events[0] as TroupeEvent).pipeline);
      process.stderr.write(`replaying against ${file}\n`);
      pipeline = await load(file, options);
    }
    // The journal keeps whole what events keep only the start of: long replies, arguments and summaries.
    // Kept under the pipeline that ran the task.
    // And the object store keeps whole what was too large for either: long outputs, tool results and records.
    const values = new ValueStore(bus);
    const journal = (await StepJournal.open(bus)).forPipeline((events[0] as TroupeEvent).pipeline, values);
    result = await replayTask(events, taskId, {
      pipeline,
      tools: options.tools === false ? 'recorded' : 'run',
      journal,
      values,
    });
  } catch (error) {
    if (error instanceof CliError) throw error;
    throw new CliError(`cannot replay task ${taskId}: ${errorMessage(error)}`);
  } finally {
    await bus.close();
  }
  const { divergence, recorded, replayed, truncated } = result;
  const against = file;
  if (options.json) {
    process.stdout.write(
      `${JSON.stringify({ taskId, pipeline: against, divergence, truncated, recorded, replayed })}\n`,
    );
    return divergence ? 1 : 0;
  }
  for (const turn of truncated) {
    process.stderr.write(
      `warning: the recording kept only part of ${turn}; the replay may differ there for that reason\n`,
    );
  }
  if (!divergence) {
    process.stdout.write(
      `replayed task ${taskId} against ${against}: the same ${recorded.length} facts as recorded\n`,
    );
    return 0;
  }
  process.stdout.write(
    `replayed task ${taskId} against ${against}: diverged at fact ${divergence.at + 1} of ${recorded.length}\n` +
      `  recorded: ${describe(divergence.recorded)}\n` +
      `  replayed: ${describe(divergence.replayed)}\n`,
  );
  return 1;
}

/** The pipeline file, loaded as `troupe up` would load it, keys aside; a bad one is refused with its problems. */
async function load(file: string, options: ReplayCommandOptions) {
  try {
    return await loadPipeline(file, {
      toolNames: builtinTools().names(),
      requireKeys: false,
      importModule: importToolModule,
      // With --no-tools no MCP server is started.
      allowMcpCommands:
        !options.tools || options.allowMcpCommands || process.env.TROUPE_ALLOW_MCP_COMMANDS === '1',
    });
  } catch (error) {
    if (error instanceof ConfigError) throw new CliError(error.message, 2);
    throw error;
  }
}

function describe(fact: RunFact | undefined): string {
  if (!fact) return '(nothing: the run ended before)';
  switch (fact.kind) {
    case 'step':
      return `step ${fact.step} by ${fact.agent}, round ${fact.round}`;
    case 'tool':
      return `step ${fact.step}, turn ${fact.turn}: ${fact.tool}(${fact.arguments})`;
    case 'tool result':
      return `step ${fact.step}, turn ${fact.turn}, call ${fact.index}: ${fact.decision}, ${fact.ok ? 'ok' : 'failed'}`;
    case 'told':
      return `step ${fact.step}, turn ${fact.turn}: read told message(s) ${fact.messageIds.join(', ')}`;
    case 'step end':
      return `step ${fact.step} ${fact.ok ? 'ok' : `failed (${fact.error ?? 'error'})`}${fact.verdict ? `, verdict ${fact.verdict}` : ''}`;
    case 'task end':
      return `task ${fact.status}${fact.reason ? ` (${fact.reason})` : ''}`;
  }
}
