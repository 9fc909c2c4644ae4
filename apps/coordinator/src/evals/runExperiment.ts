import { createHash } from 'node:crypto';
import { caseMeanScore } from '@troupe/client';
import {
  type CaseResult,
  type Dataset,
  type EvalCase,
  type EvalMode,
  type Experiment,
  emptyUsage,
  type Score,
} from '@troupe/protocol';
import { type Logger, mapLimit } from '@troupe/runtime';
import type { LoadedPipeline } from '../config/loadPipeline.ts';
import { resolveModelRef } from '../config/modelFactory.ts';
import type { CaseRun } from './evalTypes.ts';
import { runCase } from './runCase.ts';
import { runPasses } from './runPasses.ts';
import { makeScorers, scoreRun } from './scoreCase.ts';
import { stepsRun, toolsCalled } from './scorers/runFacts.ts';

export interface ExperimentOptions {
  dataset: Dataset;
  pipeline: LoadedPipeline;
  /** The pipeline file as given, and its text, whose SHA-256 the experiment keeps. */
  pipelineFile: string;
  pipelineText: string;
  mode: EvalMode;
  /** The experiment's id; `<dataset>-<UTC time>` when absent. */
  name?: string;
  /** Cases run at once, at most (default 4). */
  concurrency?: number;
  /**
   * No case that may spend (any in `model` or `live` mode; in `replay`, one with a `judge` scorer) starts once the
   * tasks' and judges' cost spent reaches this (USD); those are not run. Checked as each case starts, so with
   * `concurrency` n the cases already running may spend past it: by at most n − 1 cases' cost.
   */
  budgetUsd?: number;
  /** Where `module` scorers' paths are read from: the eval file's folder, or the working directory. */
  baseDir: string;
  /** Told of each case as it ends (and of each case not run), with how many have ended of how many. */
  onCase?: (result: CaseResult, done: number, total: number) => void;
  /** Stops the experiment: cases running are cancelled, and no other starts. */
  signal?: AbortSignal;
  env?: Readonly<Record<string, string | undefined>>;
  logger?: Logger;
  /** `live` mode: what an `ask` permission rule gets with nobody to ask (`deny`, the default, or `allow`). */
  approvals?: 'allow' | 'deny';
  /** `model` mode: tools to run for real where the recording has no matching call (see modelModeTools). */
  runTools?: readonly string[];
}

const DEFAULT_CONCURRENCY = 4;

/**
 * Runs every case of a dataset against a pipeline, a few at once and within a budget, and scores each with the
 * dataset's scorers and its own: an experiment, to store and compare. A case that cannot be run or scored is a result
 * with status `error` and the reason; the others go on. Cases come back in the dataset's order.
 */
export async function runExperiment(options: ExperimentOptions): Promise<Experiment> {
  const concurrency = options.concurrency ?? DEFAULT_CONCURRENCY;
  if (!Number.isInteger(concurrency) || concurrency < 1)
    throw new Error(`concurrency must be a whole number of at least 1 (it is ${concurrency})`);
  if (options.budgetUsd !== undefined && !(options.budgetUsd >= 0))
    throw new Error(`the budget must be 0 USD or more (it is ${options.budgetUsd})`);
  const started = new Date();
  const cases = options.dataset.cases;
  const skipped = new Set<number>();
  let done = 0;
  let spent = 0;
  const results = await mapLimit(cases, concurrency, async (evalCase, at) => {
    let result: CaseResult;
    const refusal = notRun(options, spent, evalCase);
    if (refusal !== undefined) {
      skipped.add(at);
      result = errorResult(evalCase.id, refusal, 0);
    } else {
      result = await runOne(evalCase, options);
      spent += spentOn(result, options.mode);
    }
    done += 1;
    options.onCase?.(result, done, cases.length);
    return result;
  });
  return {
    id: options.name ?? `${options.dataset.name}-${started.toISOString().replace(/[-:.]/g, '')}`,
    dataset: { name: options.dataset.name, version: options.dataset.version },
    pipeline: {
      name: options.pipeline.config.name,
      file: options.pipelineFile,
      hash: createHash('sha256').update(options.pipelineText).digest('hex'),
      models: modelsOf(options.pipeline),
    },
    mode: options.mode,
    startedAt: started.toISOString(),
    durationMs: Date.now() - started.getTime(),
    cases: results,
    ...(options.budgetUsd === undefined ? {} : { budget: { usd: options.budgetUsd, spentUsd: spent } }),
    totals: totalsOf(results, skipped),
  };
}

/**
 * Why the next case is not run, if it is not: the experiment was stopped, or its budget is spent and the case may
 * spend ({@link maySpend}). A case not run is listed all the same, with status `error` and the reason; the totals
 * count it as `skipped` and not as `errored`.
 */
function notRun(options: ExperimentOptions, spent: number, evalCase: EvalCase): string | undefined {
  if (options.signal?.aborted) return 'not run: the experiment was stopped';
  if (options.budgetUsd !== undefined && spent >= options.budgetUsd && maySpend(evalCase, options))
    return `not run: the budget of $${options.budgetUsd} was spent`;
  return undefined;
}

/**
 * Whether a case may spend anything: its task calls models (`model` and `live` modes), or a judge scores it. A replay
 * scored without judges costs nothing, so a spent budget (even `--budget-usd 0`) does not stop it.
 */
function maySpend(evalCase: EvalCase, options: ExperimentOptions): boolean {
  if (options.mode !== 'replay') return true;
  return [...options.dataset.scorers, ...(evalCase.scorers ?? [])].some((spec) => spec.type === 'judge');
}

/**
 * What a case spent: its task's model cost and its judges'. A replay calls no model, so only its judges spend; its
 * usage shows what the recorded replies cost, all the same.
 */
function spentOn(result: CaseResult, mode: EvalMode): number {
  const task = mode === 'replay' ? 0 : result.usage.costUsd;
  return task + judgeCost(result.scores);
}

const judgeCost = (scores: readonly Score[]) => scores.reduce((sum, score) => sum + (score.costUsd ?? 0), 0);

/** Runs and scores one case; never throws: what goes wrong is the result's `error`. */
async function runOne(evalCase: EvalCase, options: ExperimentOptions): Promise<CaseResult> {
  const started = Date.now();
  let run: CaseRun | undefined;
  try {
    const scorers = makeScorers([...options.dataset.scorers, ...(evalCase.scorers ?? [])], {
      baseDir: options.baseDir,
      pipeline: options.pipeline,
    });
    run = await runCase(evalCase, {
      mode: options.mode,
      pipeline: options.pipeline,
      ...(options.signal ? { signal: options.signal } : {}),
      ...(options.env ? { env: options.env } : {}),
      ...(options.logger ? { logger: options.logger } : {}),
      ...(options.approvals ? { approvals: options.approvals } : {}),
      ...(options.runTools ? { runTools: options.runTools } : {}),
    });
    const scores = await scoreRun(run, scorers, {
      pipeline: options.pipeline,
      baseDir: options.baseDir,
      ...(options.env ? { env: options.env } : {}),
      ...(options.signal ? { signal: options.signal } : {}),
    });
    return {
      ...ranResult(run),
      status: runPasses(run.status, scores) ? 'passed' : 'failed',
      scores,
    };
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    if (!run) return errorResult(evalCase.id, message, Date.now() - started);
    return { ...ranResult(run), status: 'error', scores: [], error: message };
  }
}

/** What a result keeps of its case's run: the task, its output, usage and time, tools and steps, and its events. */
function ranResult(run: CaseRun): Omit<CaseResult, 'status' | 'scores'> {
  return {
    caseId: run.case.id,
    taskId: run.taskId,
    taskStatus: run.status,
    ...(run.output === undefined ? {} : { output: run.output }),
    usage: run.usage,
    durationMs: run.durationMs,
    // As a trajectory scorer reads them.
    tools: toolsCalled(run),
    steps: stepsRun(run),
    events: [...run.events],
  };
}

function errorResult(caseId: string, error: string, durationMs: number): CaseResult {
  return {
    caseId,
    status: 'error',
    scores: [],
    usage: emptyUsage(),
    durationMs,
    error,
    tools: [],
    steps: [],
  };
}

/** Each model the file names, and each inline one (`openai:<model>`) its agents use: provider and model id. */
function modelsOf(pipeline: LoadedPipeline): Experiment['pipeline']['models'] {
  const { config } = pipeline;
  const models: Experiment['pipeline']['models'] = {};
  for (const [name, model] of Object.entries(config.models))
    models[name] = { provider: model.provider, model: model.model };
  const refs = [config.defaults.model, ...Object.values(config.agents).map((agent) => agent.model)];
  for (const ref of refs) {
    if (ref === undefined || ref in models) continue;
    const entry = resolveModelRef(config, ref);
    if (entry) models[ref] = { provider: entry.provider, model: entry.model };
  }
  return models;
}

/**
 * The experiment's sums. `meanScore` is the mean over every case of its mean score, as a comparison reads it
 * (`caseMeanScore`: a case with no scores counts 1 if it passed, else 0, so an error counts 0, and so does a case not
 * run). Cases not run (`skipped`) count in nothing else; durations are of the cases that ran.
 */
function totalsOf(results: readonly CaseResult[], skipped: ReadonlySet<number>): Experiment['totals'] {
  const ran = results.filter((_, at) => !skipped.has(at));
  const means = results.map(caseMeanScore);
  const durations = ran.map((result) => result.durationMs).sort((a, b) => a - b);
  return {
    cases: results.length,
    passed: ran.filter((result) => result.status === 'passed').length,
    failed: ran.filter((result) => result.status === 'failed').length,
    errored: ran.filter((result) => result.status === 'error').length,
    skipped: skipped.size,
    meanScore: means.length === 0 ? 0 : means.reduce((sum, mean) => sum + mean, 0) / means.length,
    costUsd: ran.reduce((sum, result) => sum + result.usage.costUsd, 0),
    judgeCostUsd: ran.reduce((sum, result) => sum + judgeCost(result.scores), 0),
    p50Ms: percentile(durations, 0.5),
    p90Ms: percentile(durations, 0.9),
  };
}

/** The nearest-rank percentile of sorted values; 0 when there are none. */
function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.max(0, Math.ceil(p * sorted.length) - 1)] ?? 0;
}
