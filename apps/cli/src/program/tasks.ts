import { type Command, Option } from 'commander';
import { commands } from '../commandModules.ts';
import { commandAction } from './commandAction.ts';
import { homeOption, positive, serverOption } from './options.ts';

/** One task: submit it, and watch, replay, trace or read what it did. */
export function registerTasksCommands(program: Command): void {
  declareSubmit(program);
  declareRun(program);
  declareTail(program);
  declareLogs(program);
  declareReplay(program);
  declareTrace(program);
  declareFiles(program);
}

function declareSubmit(program: Command): void {
  program
    .command('submit')
    .description('submit a task to a pipeline; prints its id')
    .argument('<pipeline>', 'pipeline name')
    .argument('<goal>', 'what the task should achieve')
    .option('--id <id>', 'task id (idempotency key); generated when absent')
    .option('--input <json>', 'structured input for every step, as a JSON object')
    .addOption(
      new Option(
        '--input-file <path>',
        'the input read from a file holding a JSON object ("-": standard input); one too large for the task message is stored and referred to',
      ).conflicts('input'),
    )
    .option(
      '--meta <key=value>',
      'metadata label (repeatable)',
      (v: string, all: string[]) => [...all, v],
      [],
    )
    .option(
      '-w, --wait',
      'follow the task until it ends; exit code 0 completed, 1 failed, 3 timed out',
      false,
    )
    .option('--timeout <seconds>', 'with --wait, how long to wait', positive, 600)
    .option('--json', 'with --wait, print events as JSON lines', false)
    .addOption(homeOption())
    .addOption(serverOption())
    .action(
      commandAction(async (pipeline: string, goal: string, options) =>
        (await commands.submit()).submit(pipeline, goal, options),
      ),
    );
}

function declareRun(program: Command): void {
  program
    .command('run')
    .description(
      'run one task of a pipeline file in this process, no server needed; nothing is stored, so a crash loses it',
    )
    .argument('<pipeline.yaml>', 'pipeline file')
    .argument('<goal>', 'what the task should achieve')
    .option('--id <id>', 'task id; generated when absent')
    .option('--input <json>', 'structured input for every step, as a JSON object')
    .option(
      '--yes',
      'approve every tool call a permission rule says to ask about (nobody is there to ask)',
      false,
    )
    .option('--json', 'print events and the result as JSON lines', false)
    .option(
      '--workspaces <dir>',
      "where the task's workspace goes, <dir>/<pipeline>/<task> (default: <home>/workspaces)",
    )
    .option('--allow-mcp-commands', 'accept MCP servers that start a local command (stdio transport)', false)
    .addOption(homeOption())
    .action(
      commandAction(async (file: string, goal: string, options) =>
        (await commands.run()).run(file, goal, options),
      ),
    );
}

function declareTail(program: Command): void {
  program
    .command('tail')
    .description('print the live message flow: one line per event (subject, task, from → to, kind)')
    .option('-t, --task <id>', 'only this task: its history first; stops when it has ended')
    .option('-p, --pipeline <name>', 'only this pipeline')
    .option('--since <duration>', 'first the events stored this long ago, e.g. 30s, 5m, 2h, 1d')
    .option('--agent <name>', 'only events from, to or about this agent')
    .option(
      '--kind <kind>',
      'only events of this kind (repeatable, or comma-separated; llm.* for a family)',
      (v: string, all: string[]) => [...all, v],
      [],
    )
    .option('--json', 'raw events as JSON lines', false)
    .addOption(homeOption())
    .addOption(serverOption())
    .action(commandAction(async (options) => (await commands.tail()).tail(options)));
}

function declareLogs(program: Command): void {
  program
    .command('logs')
    .description(
      "print a task's whole flow from the EVENTS stream, as tail does; --follow to see it to its end",
    )
    .argument('<task-id>', 'the task')
    .option(
      '-f, --follow',
      'then follow it live until it ends; exit code 0 completed, 1 failed or cancelled',
      false,
    )
    .option('--json', 'raw events as JSON lines', false)
    .addOption(homeOption())
    .addOption(serverOption())
    .action(commandAction(async (taskId: string, options) => (await commands.logs()).logs(taskId, options)));
}

function declareReplay(program: Command): void {
  program
    .command('replay')
    .description(
      'run a recorded task again offline (model replies from its events, tools run again) and report where it diverges',
    )
    .argument('<task-id>', 'the recorded task')
    .option(
      '-p, --pipeline <file>',
      "the pipeline file to replay against: the one it ran with, or an edited one (default: the one file here that declares the task's pipeline)",
    )
    .option('--no-tools', "run no tool: each call the policy allows answers with the recorded call's result")
    .option(
      '--allow-mcp-commands',
      "start the pipeline's stdio MCP servers, for their tools to run again",
      false,
    )
    .option('--json', "both runs' facts and the divergence as one JSON document", false)
    .addOption(homeOption())
    .addOption(serverOption())
    .action(
      commandAction(async (taskId: string, options) => (await commands.replay()).replay(taskId, options)),
    );
}

function declareTrace(program: Command): void {
  program
    .command('trace')
    .description(
      'show a task as a tree: steps, model calls (tokens, cost, latency), tool calls, approvals, retries, errors, totals',
    )
    .argument('<task-id>', 'the task, finished or running')
    .option('--json', 'the tree as one JSON document', false)
    .addOption(homeOption())
    .addOption(serverOption())
    .action(
      commandAction(async (taskId: string, options) => (await commands.trace()).trace(taskId, options)),
    );
}

function declareFiles(program: Command): void {
  program
    .command('files')
    .description("list a task's workspace files (recursively), or print one as it is")
    .argument('<task-id>', 'the task')
    .argument('[path]', 'a file to print, or a directory to list (default: the whole workspace)')
    .option(
      '--workspaces <dir>',
      'where task workspaces are (default: <home>/workspaces, where troupe up and troupe worker keep them)',
    )
    .option('--force', 'print a binary file to a terminal all the same', false)
    .option('--json', 'the listing as one JSON document', false)
    .addOption(homeOption())
    .addOption(serverOption())
    .action(
      commandAction(async (taskId: string, path: string | undefined, options) =>
        (await commands.files()).files(taskId, path, options),
      ),
    );
}
