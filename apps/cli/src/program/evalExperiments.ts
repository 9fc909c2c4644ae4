import { type Command, InvalidArgumentError, Option } from 'commander';
import { commands } from '../commandModules.ts';
import { EVAL_FORMATS } from '../format/evalReport.ts';
import { commandAction } from './commandAction.ts';
import { homeOption, natsAccessOptions, positiveInteger, serverOption } from './options.ts';

/** `troupe eval run`, `compare`, `list` and `show`: experiments and what they say. */
export function declareExperimentCommands(evals: Command): void {
  declareRun(evals);
  declareCompare(evals);
  declareList(evals);
  declareShow(evals);
}

const formatOption = () =>
  new Option('--format <format>', 'how to print the report: table, json, junit (XML) or markdown')
    .choices(EVAL_FORMATS)
    .default('table');

const nonNegative = (value: string): number => {
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0) throw new InvalidArgumentError('must be a number, 0 or more');
  return n;
};

/**
 * The server options, NATS access among them (main.ts adds those to top-level commands only); and a usage error
 * (an option's value refused, an argument or a required option missing) exits 2, as the eval commands' "could not
 * run" does — commander's own exit code for one is 1, which these commands give a failed case or a regression.
 */
function serverOptions(command: Command): Command {
  command.addOption(serverOption()).addOption(homeOption());
  for (const option of natsAccessOptions()) command.addOption(option);
  return command.exitOverride((error) => process.exit(error.exitCode === 0 ? 0 : 2));
}

function declareRun(evals: Command): void {
  const command = evals
    .command('run')
    .description(
      'run a dataset against a pipeline file in this process and score each case: an experiment, stored unless --no-store; exit 0 all passed, 1 a case did not, 2 it could not run',
    )
    .argument('<dataset>', 'a stored dataset name[@version], or a dataset file (.yaml, .yml, .json, .jsonl)')
    .requiredOption('--pipeline <file>', 'the pipeline file to run the cases on')
    .addOption(
      new Option(
        '--mode <mode>',
        'replay (recorded replies and tool results), model (models called, tools from the recording) or live; default replay when every case has a recording',
      ).choices(['replay', 'model', 'live']),
    )
    .option('--name <id>', "the experiment's id (default: the dataset's name and the time)")
    .option('--concurrency <n>', 'cases run at once', positiveInteger, 4)
    .option(
      '--budget-usd <n>',
      'start no case that may spend (model or live mode, or a judge scorer) once the tasks and judges have spent this much (USD); checked as each case starts, so with --concurrency n the cases running may overshoot it by up to n-1 cases',
      nonNegative,
    )
    .addOption(formatOption())
    .option('--out <file>', 'write the report to this file instead of standard output')
    .option('--no-store', 'do not store the experiment (with a dataset file, no server is needed)')
    .option(
      '--replace',
      'store the experiment even when its id (--name) is stored already, replacing that one (without it, such a run is refused before any case runs)',
      false,
    )
    .option(
      '--save <file.json>',
      'also write the experiment as JSON to this file (troupe eval compare reads it)',
    )
    .option('--allow-mcp-commands', 'start the pipeline’s MCP servers that run a local command', false)
    .option(
      '--run-tools <names>',
      'model mode: also run these tools (comma-separated) for real where the recording has no matching call, although they may have effects; read-only tools and the file tools always do',
      (value: string) =>
        value
          .split(',')
          .map((name) => name.trim())
          .filter((name) => name !== ''),
    );
  serverOptions(command).action(
    commandAction(async (dataset: string, options) => (await commands.evalRun()).evalRun(dataset, options)),
  );
}

function declareCompare(evals: Command): void {
  const command = evals
    .command('compare')
    .description(
      'compare experiment B with A case by case: regressions, improvements, score and cost deltas, a verdict; exit 1 when B regressed (a pass lost, the mean score fell beyond its interval, or the cost rose more than allowed)',
    )
    .argument('<a>', 'the baseline: a stored experiment id, or an experiment JSON file (--save)')
    .argument('<b>', 'the candidate, likewise')
    .addOption(formatOption())
    .option(
      '--max-cost-increase <pct>',
      "fail when B's cost is more than this many per cent above A's",
      (value: string) => nonNegative(value.replace(/%$/, '')),
    )
    .option('--out <file>', 'write the report to this file instead of standard output');
  serverOptions(command).action(
    commandAction(async (a: string, b: string, options) =>
      (await commands.evalCompare()).evalCompare(a, b, options),
    ),
  );
}

function declareList(evals: Command): void {
  const command = evals
    .command('list')
    .description('the stored experiments, newest first')
    .option('--json', 'a JSON summary a line', false);
  serverOptions(command).action(
    commandAction(async (options) => (await commands.evalShow()).evalList(options)),
  );
}

function declareShow(evals: Command): void {
  const command = evals
    .command('show')
    .description(
      "an experiment's report; with a case, its scores with their reasons and its run as troupe trace draws it",
    )
    .argument('<experiment>', 'a stored experiment id, or an experiment JSON file')
    .argument('[case]', 'one case of it')
    .addOption(formatOption());
  serverOptions(command).action(
    commandAction(async (experiment: string, caseId: string | undefined, options) =>
      (await commands.evalShow()).evalShow(experiment, caseId, options),
    ),
  );
}
