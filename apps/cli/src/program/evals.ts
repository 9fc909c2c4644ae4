import type { Command } from 'commander';
import { declareDatasetCommands } from './evalDatasets.ts';
import { declareExperimentCommands } from './evalExperiments.ts';

/** `troupe eval`: datasets of cases (made from recorded runs or written by hand), experiments and their comparison. */
export function registerEvalCommands(program: Command): void {
  const evals = program
    .command('eval')
    .description(
      'evaluate a pipeline: datasets from recorded runs or files, experiments scored per case, comparisons and a CI gate',
    );
  declareDatasetCommands(evals);
  declareExperimentCommands(evals);
}
