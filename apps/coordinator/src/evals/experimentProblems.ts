import type { Dataset, ScorerSpec } from '@troupe/protocol';
import type { LoadedPipeline } from '../config/loadPipeline.ts';
import { type Env, keyEnvOf, modelLabel, resolveModelRef } from '../config/modelFactory.ts';
import { scorerProblems } from './scoreCase.ts';

/**
 * Why an experiment cannot run, found before any case runs (and spends): each scorer of the dataset and of each case
 * that cannot be made with the pipeline (as `runExperiment` will make it: CEL parsed, regex compiled, a module's file
 * found from `baseDir`, a judge's model among the pipeline's `models:`), and each judge whose model's API key is not
 * set in `env`. One message per problem, naming the case (for a case's own scorer) and the scorer; none when it can
 * run. A judge's key is needed whatever the mode: a judge calls its model in a replay too.
 */
export function experimentProblems(options: {
  dataset: Pick<Dataset, 'scorers' | 'cases'>;
  pipeline: LoadedPipeline;
  baseDir: string;
  env: Env;
}): string[] {
  const { dataset, pipeline, baseDir, env } = options;
  const made = { baseDir, pipeline };
  const problems: string[] = [];
  const check = (specs: readonly ScorerSpec[], where: string) => {
    for (const { error } of scorerProblems(specs, made)) problems.push(`${where}: ${error.message}`);
    for (const spec of specs) {
      if (spec.type !== 'judge') continue;
      const model = resolveModelRef(pipeline.config, spec.model);
      const keyEnv = model && keyEnvOf(model);
      if (model && keyEnv !== undefined && !env[keyEnv])
        problems.push(
          `${where}: judge ${spec.name ?? `(${spec.model})`} uses ${modelLabel(model)}, which needs the environment variable ${keyEnv}; it is not set`,
        );
    }
  };
  check(dataset.scorers, "the dataset's scorers");
  for (const evalCase of dataset.cases)
    if (evalCase.scorers && evalCase.scorers.length > 0) check(evalCase.scorers, `case ${evalCase.id}`);
  return problems;
}
