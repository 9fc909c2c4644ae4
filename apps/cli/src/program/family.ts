import type { Command } from 'commander';
import { commands } from '../commandModules.ts';
import { commandAction } from './commandAction.ts';
import { collect, homeOption, serverOption } from './options.ts';

/** `restart` and `fork`: a new task from an ended one, run on from one of its steps, the steps before it reused. */
export function registerFamilyCommands(program: Command): void {
  program
    .command('restart')
    .description(
      'run a failed or cancelled task again from a step, as a new task linked to it: the steps that completed before that step are reused (no model call, no tool call, nobody asked), the step and all after it run',
    )
    .argument('<task-id>', 'the failed or cancelled task')
    .requiredOption('--from <step>', 'the step to run again, with every step after it')
    .option(
      '--newest',
      'run on the newest version of the pipeline (after a fix), not the one the task ran on',
      false,
    )
    .option('--by <name>', "who restarts it, kept in the new task's origin (default: user@host)")
    .addOption(homeOption())
    .addOption(serverOption())
    .action(
      commandAction(async (taskId: string, options) => (await commands.family()).restart(taskId, options)),
    );
  program
    .command('fork')
    .description(
      'start a new task from an ended one at a step, with its input or earlier step outputs edited: the steps that completed before that step are reused (with the edits), the step and all after it run',
    )
    .argument('<task-id>', 'the ended task')
    .requiredOption('--at <step>', 'the step to run on from')
    .option(
      '--input <json>',
      'the new input: a JSON object, or @<path> for a file holding one (@-: standard input)',
    )
    .option(
      '--set <steps.id.output=text>',
      'replace the reused output of an earlier step (its text, not the files it wrote), e.g. --set steps.plan.output="use v2" (repeatable)',
      collect,
      [],
    )
    .option('--newest', 'run on the newest version of the pipeline, not the one the task ran on', false)
    .option('--by <name>', "who forks it, kept in the new task's origin (default: user@host)")
    .addOption(homeOption())
    .addOption(serverOption())
    .action(
      commandAction(async (taskId: string, options) => (await commands.family()).fork(taskId, options)),
    );
}
