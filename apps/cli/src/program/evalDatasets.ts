import type { Command } from 'commander';
import { commands } from '../commandModules.ts';
import { commandAction } from './commandAction.ts';
import {
  collect,
  duration,
  homeOption,
  natsAccessOptions,
  positiveInteger,
  serverOption,
} from './options.ts';

/** `troupe eval dataset …`: add (from files or recorded runs), list and show datasets. */
export function declareDatasetCommands(evals: Command): void {
  const dataset = evals
    .command('dataset')
    .description(
      'datasets of cases to evaluate a pipeline on: made from files or recorded runs, versioned in NATS',
    );
  dataset
    .command('add')
    .description(
      "store a new version of a dataset: the previous version's cases and the new ones (a case with an id already there replaces it), from files, from recorded runs (each kept whole, to replay after the server forgets it) or from tasks named, less the scorers and cases removed",
    )
    .argument('<name>', 'the dataset')
    .option(
      '--file <path>',
      'a dataset file, YAML (.yaml, .yml, .json: show --json prints one) or JSONL; its scorers are checked first; a file of scorers alone adds its scorers (repeatable)',
      collect,
      [],
    )
    .option('--from-runs', 'add the tasks a pipeline ran (with --pipeline), the newest first', false)
    .option('--pipeline <name>', 'the pipeline whose tasks --from-runs takes (and --tasks checks)')
    .option(
      '--status <status>',
      'only tasks that ended so: completed, failed or cancelled (default: any ended)',
    )
    .option('--since <duration>', 'only tasks created this long ago or less: 30m, 12h, 7d', duration)
    .option('--limit <n>', 'at most this many tasks from --from-runs', positiveInteger, 50)
    .option('--tasks <ids>', 'add these tasks, comma-separated')
    .option('--description <text>', "what the dataset is for (default: the previous version's)")
    .option(
      '--remove-scorer <name>',
      "the new version goes without this scorer: by its name, or its type when it has none, as show lists it; the dataset's and each case's own (repeatable)",
      collect,
      [],
    )
    .option('--remove-case <id>', 'the new version goes without this case (repeatable)', collect, [])
    .addOption(homeOption())
    .addOption(serverOption())
    .action(
      commandAction(async (name: string, options) => (await commands.evalDataset()).add(name, options)),
    );
  dataset
    .command('list')
    .description('every version of every dataset, the newest first')
    .option('--json', 'one JSON summary a line', false)
    .addOption(homeOption())
    .addOption(serverOption())
    .action(commandAction(async (options) => (await commands.evalDataset()).list(options)));
  dataset
    .command('show')
    .description("a dataset's scorers and cases (its newest version, or the one after @)")
    .argument('<dataset>', 'name or name@version')
    .option('--json', 'the whole version, recordings included, as one JSON document', false)
    .addOption(homeOption())
    .addOption(serverOption())
    .action(commandAction(async (ref: string, options) => (await commands.evalDataset()).show(ref, options)));
  // How to log in to the server, as every command with --server takes it (main.ts adds these to top-level ones only).
  for (const command of dataset.commands) for (const option of natsAccessOptions()) command.addOption(option);
}
