import { readFile, writeFile } from 'node:fs/promises';
import { dirname, extname, resolve as resolvePath } from 'node:path';
import { caseMeanScore, type EvalStore } from '@troupe/client';
import {
  builtinTools,
  ConfigError,
  DatasetFileError,
  experimentProblems,
  type LoadedPipeline,
  loadPipeline,
  readDatasetFile,
  runExperiment,
} from '@troupe/coordinator';
import {
  type CaseResult,
  type Dataset,
  type EvalMode,
  type Experiment,
  errorMessage,
} from '@troupe/protocol';
import { exitWhenStdoutCloses } from '../closedPipe.ts';
import { couldNotRun, LazyEvalStore } from '../experimentSource.ts';
import { formatDuration } from '../format/duration.ts';
import { type EvalFormat, failingOf, plural, renderExperiment } from '../format/evalReport.ts';
import { CliError, type ServerOptions } from '../server.ts';
import { importToolModule } from '../toolModuleImport.ts';

export interface EvalRunOptions extends ServerOptions {
  pipeline: string;
  /** Replay when every case has a recording; otherwise it must be given. */
  mode?: EvalMode;
  name?: string;
  concurrency: number;
  budgetUsd?: number;
  format: EvalFormat;
  /** Write the report here instead of to standard output. */
  out?: string;
  /** False with `--no-store`: the experiment is not stored (no server needed with a dataset file). */
  store: boolean;
  /** Write the experiment as JSON here, for `troupe eval compare` without a server. */
  save?: string;
  /** `--replace`: store the experiment even when its id (`--name`) is stored already, replacing that one. */
  replace?: boolean;
  allowMcpCommands: boolean;
  /** `--run-tools a,b`: model mode runs these tools for real where the recording has no matching call. */
  runTools?: string[];
}

/** The server's eval store, reached when first asked for ({@link LazyEvalStore}; a test gives its own). */
export interface EvalRunStores {
  store(): Promise<EvalStore>;
  close(): Promise<void>;
}

const DATASET_FILE = new Set(['.yaml', '.yml', '.json', '.jsonl']);

/**
 * `troupe eval run <dataset> --pipeline <file>`: runs each case of a dataset (a stored `name[@version]`, or a file)
 * against a pipeline file in this process, scores it, prints a line per case as it ends (stderr) and the report
 * (stdout or `--out`), and stores the experiment unless `--no-store`. Exit 0 when every case passed, 1 when one
 * failed, errored or was not run, 2 when the experiment could not be run.
 */
export async function evalRun(
  datasetArg: string,
  options: EvalRunOptions,
  stores: EvalRunStores = new LazyEvalStore(options, 'troupe-eval-run'),
): Promise<number> {
  exitWhenStdoutCloses();
  const abort = new AbortController();
  const cancel = () => abort.abort();
  process.once('SIGINT', cancel);
  process.once('SIGTERM', cancel);
  let experiment: Experiment;
  try {
    // With the experiment to be stored, the server is reached before any case spends anything.
    const store = options.store ? await stores.store() : undefined;
    if (store && options.name !== undefined && !options.replace && (await store.experiment(options.name)))
      throw new CliError(
        `experiment ${options.name} is stored already: give this run another --name, or pass --replace to replace it`,
        2,
      );
    const { dataset, baseDir } = await datasetOf(datasetArg, store, stores);
    const mode = options.mode ?? defaultMode(dataset);
    if (!hasScorers(dataset))
      process.stderr.write(
        `warning: ${dataset.name}@${dataset.version} has no scorers: each case passes only if its task completes (troupe eval dataset add ${dataset.name} --file <scorers.yaml> adds some)\n`,
      );
    const pipelineText = await readFile(options.pipeline, 'utf8').catch(() => undefined);
    const pipeline = await load(options.pipeline, mode, options);
    // What cannot run is said before any case runs (and spends): a scorer that cannot be made, a judge's missing key.
    const problems = experimentProblems({ dataset, pipeline, baseDir, env: process.env });
    if (problems.length > 0)
      throw new CliError(
        `cannot run ${dataset.name}@${dataset.version} on ${options.pipeline}: ${problems.join('; ')}`,
        2,
      );
    process.stderr.write(
      `running ${plural(dataset.cases.length, 'case')} of ${dataset.name}@${dataset.version} against ${options.pipeline} (${mode})\n`,
    );
    experiment = await runExperiment({
      dataset,
      pipeline,
      pipelineFile: options.pipeline,
      pipelineText: pipelineText ?? '',
      mode,
      ...(options.name === undefined ? {} : { name: options.name }),
      concurrency: options.concurrency,
      ...(options.budgetUsd === undefined ? {} : { budgetUsd: options.budgetUsd }),
      baseDir,
      ...(options.runTools ? { runTools: options.runTools } : {}),
      signal: abort.signal,
      onCase: (result, done, total) => process.stderr.write(`${progressLine(result, done, total)}\n`),
    });
    if (options.save !== undefined) await writeFile(options.save, experimentJson(experiment));
    // The report first: what the cases cost to learn is shown whatever the store says.
    const report = renderExperiment(experiment, options.format);
    if (options.out !== undefined) await writeFile(options.out, report);
    else process.stdout.write(report);
    if (store) await storeExperiment(store, experiment, options);
  } catch (error) {
    return couldNotRun(error, `cannot run ${datasetArg}`);
  } finally {
    process.off('SIGINT', cancel);
    process.off('SIGTERM', cancel);
    await stores.close();
  }
  const t = experiment.totals;
  if (options.out !== undefined)
    process.stderr.write(`${t.passed} of ${plural(t.cases, 'case')} passed; report in ${options.out}\n`);
  return t.passed === t.cases ? 0 : 1;
}

const experimentJson = (experiment: Experiment) => `${JSON.stringify(experiment, null, 2)}\n`;

/**
 * Stores the experiment once it has run and its report is out. A store that refuses it (a user who may read
 * troupe-evals but not write it, its id taken meanwhile, the server gone) does not lose it: the failure is told on
 * stderr, and without `--save` the experiment is written to `<id>.json` here (compare and show read it); the exit
 * code stays the run's. Checking beforehand instead would cost a write of its own and still miss what changes while
 * the cases run.
 */
async function storeExperiment(
  store: EvalStore,
  experiment: Experiment,
  options: EvalRunOptions,
): Promise<void> {
  try {
    await store.putExperiment(experiment, { replace: options.replace === true });
    process.stderr.write(`stored experiment ${experiment.id}\n`);
    return;
  } catch (error) {
    process.stderr.write(`warning: cannot store experiment ${experiment.id}: ${errorMessage(error)}\n`);
  }
  if (options.save !== undefined) {
    process.stderr.write(`the experiment is in ${options.save}\n`);
    return;
  }
  const file = `${experiment.id.replace(/[^\w.@-]/g, '_')}.json`;
  try {
    await writeFile(file, experimentJson(experiment), { flag: 'wx' });
    process.stderr.write(`saved the experiment to ${file} instead (troupe eval compare and show read it)\n`);
  } catch (error) {
    process.stderr.write(`warning: cannot save the experiment to ${file} either: ${errorMessage(error)}\n`);
  }
}

/** A case as it ends: `[3/12] case-3 failed 0.50 (contains) 1.2 s`. */
export function progressLine(result: CaseResult, done: number, total: number): string {
  const mean = result.scores.length === 0 ? '' : ` ${caseMeanScore(result).toFixed(2)}`;
  const failing = failingOf(result);
  return `[${done}/${total}] ${result.caseId} ${result.status}${mean}${failing ? ` (${failing})` : ''} ${formatDuration(result.durationMs)}`;
}

/**
 * The dataset to run and where its module scorers' paths start: a file's (its folder), or a stored version (the
 * working directory). A file run while storing becomes a stored version (the newest, when its content is the same)
 * so the experiment names a dataset the server has; with `--no-store` it is version 1 of its name. A stored dataset
 * is read from the server with `--no-store` too (nothing is stored): it must be reachable.
 */
async function datasetOf(
  arg: string,
  store: EvalStore | undefined,
  stores: EvalRunStores,
): Promise<{ dataset: Dataset; baseDir: string }> {
  if (DATASET_FILE.has(extname(arg).toLowerCase())) {
    const content = await readDatasetFile(arg).catch((error) => {
      if (error instanceof DatasetFileError) throw new CliError(error.message, 2);
      throw error;
    });
    const baseDir = dirname(resolvePath(arg));
    if (!store) return { dataset: { ...content, version: 1, createdAt: new Date().toISOString() }, baseDir };
    const newest = await store.dataset(content.name);
    if (newest && sameContent(newest, content)) return { dataset: newest, baseDir };
    const stored = await store.putDataset(content);
    process.stderr.write(`stored ${arg} as dataset ${stored.name}@${stored.version}\n`);
    return { dataset: stored, baseDir };
  }
  const match = /^([^@]+)(?:@(\d+))?$/.exec(arg);
  if (!match)
    throw new CliError(
      `"${arg}" is neither a dataset file (.yaml, .yml, .json, .jsonl) nor a stored name[@version]`,
      2,
    );
  const [, name = '', version] = match;
  const reader =
    store ??
    (await stores.store().catch((error) => {
      throw new CliError(
        `${arg} names a stored dataset (a file ends in .yaml, .yml, .json or .jsonl), and the server cannot be reached to read it: ${errorMessage(error)}`,
        2,
      );
    }));
  const dataset = await reader.dataset(name, version === undefined ? undefined : Number(version));
  if (!dataset)
    throw new CliError(
      `no dataset ${arg} is stored on this server (troupe eval dataset list shows them; a file ends in .yaml, .yml, .json or .jsonl)`,
      2,
    );
  return { dataset, baseDir: process.cwd() };
}

function sameContent(
  stored: Dataset,
  content: Pick<Dataset, 'name' | 'description' | 'scorers' | 'cases'>,
): boolean {
  const of = (d: Pick<Dataset, 'description' | 'scorers' | 'cases'>) =>
    JSON.stringify({ description: d.description ?? null, scorers: d.scorers, cases: d.cases });
  return of(stored) === of(content);
}

/** Whether any case is scored: by the dataset's scorers, or by its own. */
const hasScorers = (dataset: Dataset): boolean =>
  dataset.scorers.length > 0 || dataset.cases.some((c) => (c.scorers ?? []).length > 0);

/** Replay when every case was recorded; a dataset with cases that were not must say how to run them. */
function defaultMode(dataset: Dataset): EvalMode {
  const unrecorded = dataset.cases.filter((c) => c.recording === undefined).map((c) => c.id);
  if (unrecorded.length === 0) return 'replay';
  throw new CliError(
    `${unrecorded.length} of the ${dataset.cases.length} cases of ${dataset.name}@${dataset.version} have no recording to replay (${unrecorded.slice(0, 5).join(', ')}${unrecorded.length > 5 ? ', …' : ''}): pass --mode model (models called, tools answered from recordings where they match) or --mode live`,
    2,
  );
}

/** The pipeline file, loaded as `troupe run` loads it; model keys are needed only when models are called. */
async function load(file: string, mode: EvalMode, options: EvalRunOptions): Promise<LoadedPipeline> {
  try {
    return await loadPipeline(file, {
      toolNames: builtinTools().names(),
      requireKeys: mode !== 'replay',
      importModule: importToolModule,
      allowMcpCommands: options.allowMcpCommands || process.env.TROUPE_ALLOW_MCP_COMMANDS === '1',
    });
  } catch (error) {
    if (error instanceof ConfigError) throw new CliError(error.message, 2);
    throw error;
  }
}
