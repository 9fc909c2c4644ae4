import type { Command } from 'commander';
import { commands } from '../commandModules.ts';
import { commandAction } from './commandAction.ts';
import { homeOption, pipelinesOption, positive, positiveInteger, serverOption } from './options.ts';

/** The tasks and pipeline versions on record: list them, stop, hold, tell or move a task, roll a pipeline back. */
export function registerControlCommands(program: Command): void {
  declareStatus(program);
  declareRuns(program);
  declareCancel(program);
  declareSteering(program);
  declareMigrate(program);
  declareVersions(program);
}

function declareStatus(program: Command): void {
  program
    .command('status')
    .description('show tasks from the workflows bucket: state, round, usage, age (running ones unless --all)')
    .argument('[task-id]', 'one task')
    .option('-a, --all', 'include finished tasks', false)
    .option('--json', 'one JSON record per line', false)
    .addOption(homeOption())
    .addOption(serverOption())
    .addOption(pipelinesOption())
    .action(
      commandAction(async (taskId: string | undefined, options) =>
        (await commands.control()).status(taskId, options),
      ),
    );
}

function declareRuns(program: Command): void {
  program
    .command('runs')
    .description(
      "list tasks, newest first: state, rounds, duration, tokens, cost, age, and a restart's or fork's origin (--totals: per pipeline or day)",
    )
    .option('-p, --pipeline <name>', 'only this pipeline')
    .option(
      '--state <state>',
      'only tasks in this state: running (paused ones too), paused, completed, failed or cancelled',
    )
    .option('--limit <n>', 'at most this many tasks', positiveInteger, 50)
    .option(
      '--totals <by>',
      'instead of the tasks, their tokens and cost summed per pipeline or per day (UTC): pipeline or day',
    )
    .option(
      '--family <task-id>',
      'only the family of this task: the task it was restarted or forked from, and every task made from that one',
    )
    .option('--json', 'one JSON record per line, without its snapshot (with --totals: one per total)', false)
    .addOption(homeOption())
    .addOption(serverOption())
    .action(commandAction(async (options) => (await commands.runs()).runs(options)));
}

function declareCancel(program: Command): void {
  program
    .command('cancel')
    .description('stop a running task: its model call in flight is aborted and task.cancelled is published')
    .argument('<task-id>', 'the task')
    .option('--reason <text>', 'recorded in task.cancelled')
    .addOption(homeOption())
    .addOption(serverOption())
    .action(
      commandAction(async (taskId: string, options) => (await commands.control()).cancel(taskId, options)),
    );
}

/** `pause`, `resume` and `tell`: a person steering a running task through the coordinator running it. */
function declareSteering(program: Command): void {
  program
    .command('pause')
    .description(
      'hold a running task: the step at work finishes its current model or tool call, then nothing runs until resume',
    )
    .argument('<task-id>', 'the task')
    .option('--reason <text>', 'recorded in task.paused and shown by troupe status')
    .option('--by <name>', 'who pauses it (default: user@host)')
    .addOption(homeOption())
    .addOption(serverOption())
    .action(
      commandAction(async (taskId: string, options) => (await commands.steer()).pause(taskId, options)),
    );
  program
    .command('resume')
    .description('let a paused task go on from where it was held')
    .argument('<task-id>', 'the task')
    .option('--by <name>', 'who resumes it (default: user@host)')
    .addOption(homeOption())
    .addOption(serverOption())
    .action(
      commandAction(async (taskId: string, options) => (await commands.steer()).resume(taskId, options)),
    );
  program
    .command('tell')
    .description(
      'tell the agent at work something: it reads it before its next model call, as a user turn (the next step does when none is at work)',
    )
    .argument('<task-id>', 'the task')
    .argument('<message...>', 'the message ("-": read it from standard input)')
    .option('--by <name>', 'who tells it (default: user@host)')
    .option(
      '--key <key>',
      "the tell's idempotency key (default: a new uuid, printed if no answer came): told again with it, the task is told once",
    )
    .option('--wait <seconds>', "how long to wait for the coordinator's answer", positive, 10)
    .addOption(homeOption())
    .addOption(serverOption())
    .action(
      commandAction(async (taskId: string, words: string[], options) =>
        (await commands.steer()).tell(taskId, words, options),
      ),
    );
}

function declareMigrate(program: Command): void {
  program
    .command('migrate')
    .description(
      'move a running task to another version of its pipeline, only where its state fits that version (else say why)',
    )
    .argument('<task-id>', 'the task')
    .option('--to <hash>', 'the version: its hash, or a prefix of it (troupe runs shows 12 digits)')
    .option('--latest', 'the newest version, the one new tasks start on', false)
    .addOption(homeOption())
    .addOption(serverOption())
    .action(
      commandAction(async (taskId: string, options) => (await commands.control()).migrate(taskId, options)),
    );
}

function declareVersions(program: Command): void {
  program
    .command('versions')
    .description('the stored versions of pipelines')
    .command('use')
    .description(
      'make a stored version of a pipeline the one new tasks start on (a rollback); coordinators of older versions restarting leave it so',
    )
    .argument('<pipeline>', 'the pipeline')
    .argument('<version>', 'its hash, or a prefix of it (troupe validate prints it for a file)')
    .addOption(homeOption())
    .addOption(serverOption())
    .action(
      commandAction(async (pipeline: string, version: string, options) =>
        (await commands.versions()).use(pipeline, version, options),
      ),
    );
}
