import type { Command } from 'commander';
import { commands } from '../commandModules.ts';
import { commandAction } from './commandAction.ts';
import { collect, replicasOption } from './options.ts';

/** The NATS users a deployment runs with, written for nats-server. */
export function registerNatsConfigCommands(program: Command): void {
  program
    .command('nats-config')
    .description(
      'write a nats-server accounts block with an account and an nkey user per role, each allowed the least it needs, and their seeds',
    )
    .argument('<pipeline.yaml...>', 'the pipelines the roles name')
    .requiredOption(
      '--out <dir>',
      "where to write troupe-auth.conf and each user's <name>.nk and <name>.env (required)",
    )
    .option(
      '--coordinator <name>',
      'a coordinator user (repeatable; default one named coordinator)',
      collect,
      [],
    )
    .option(
      '--worker <name=pipeline:agents>',
      'a worker serving these agents, comma-separated (repeatable)',
      collect,
      [],
    )
    .option(
      '--submitter <name=pipelines>',
      'a user that submits tasks to these pipelines (repeatable)',
      collect,
      [],
    )
    .option(
      '--observer <name=pipelines>',
      "a user that reads these pipelines' events and tasks (repeatable)",
      collect,
      [],
    )
    .option(
      '--approver <name=pipelines>',
      'a user that decides approvals and answers questions (repeatable)',
      collect,
      [],
    )
    .option(
      '--evaluator <name=pipelines>',
      "a user that makes eval datasets from these pipelines' recorded runs and stores datasets and experiments (repeatable)",
      collect,
      [],
    )
    .option(
      '--gateway <name>',
      'a user for troupe gateway: submits, cancels, decides and reads for every pipeline (repeatable)',
      collect,
      [],
    )
    .addOption(
      replicasOption(
        'the --replicas the deployment runs with (above 1, workers may read every pipeline’s journal and memory; default 1)',
      ),
    )
    .action(
      commandAction(async (files: string[], options) =>
        (await commands.natsConfig()).natsConfig(files, {
          ...options,
          coordinator: options.coordinator.length > 0 ? options.coordinator : ['coordinator'],
        }),
      ),
    );
}
