import { errorMessage, type Score, type ScorerSpec } from '@troupe/protocol';
import { type Clock, systemClock } from '@troupe/runtime';
import type { LoadedPipeline } from '../config/loadPipeline.ts';
import type { ImportModule } from '../config/toolModules.ts';
import { EvalsError } from './evalsError.ts';
import type { CaseRun, ScoreContext, Scorer } from './evalTypes.ts';
import { celCheck } from './scorers/celScorer.ts';
import { type Check, CheckError, type CheckOptions } from './scorers/check.ts';
import { jsonSchemaCheck } from './scorers/jsonSchemaScorer.ts';
import { judgeCheck } from './scorers/judgeScorer.ts';
import { moduleCheck } from './scorers/moduleScorer.ts';
import { safetyCheck } from './scorers/safetyScorer.ts';
import { containsCheck, exactCheck, regexCheck } from './scorers/textScorers.ts';
import { trajectoryCheck } from './scorers/trajectoryScorer.ts';

/** Each kind of scorer's spec, by its `type`. */
type Specs = { [S in ScorerSpec as S['type']]: S };

/** How each kind of scorer is made from its spec: checked now, so a bad one is refused before any case runs. */
const CHECKS: { [T in keyof Specs]: (spec: Specs[T], options: CheckOptions) => Check } = {
  exact: exactCheck,
  contains: containsCheck,
  regex: regexCheck,
  jsonSchema: jsonSchemaCheck,
  cel: celCheck,
  trajectory: trajectoryCheck,
  judge: judgeCheck,
  safety: safetyCheck,
  module: moduleCheck,
};

/** The score a check must reach to pass, unless its spec says: graded ones (a judge, a module) 0.5, checks 1. */
const DEFAULT_THRESHOLD: Partial<Record<ScorerSpec['type'], number>> = { judge: 0.5, module: 0.5 };

const MAX_NAME = 80;

/** How long one scorer may take on one run unless its spec's `timeoutMs` says: past it, its score is an error. */
export const SCORER_TIMEOUT_MS = 60_000;

export interface MakeScorersOptions {
  /** Where a `module` scorer's path is read from: the eval file's folder, or the working directory. */
  baseDir: string;
  /** The pipeline the cases run on: a judge's `model` must be one of its `models:`. */
  pipeline?: LoadedPipeline;
  /**
   * The runs are live tasks (a pipeline's `evals:` block), which have no expected output: an `exact` scorer without
   * a `value` of its own is refused.
   */
  online?: boolean;
  /**
   * Imports a `module` scorer, given its absolute path: the pipeline's own importer (`LoadedPipeline.importModule`)
   * when absent, else Node's `import()`, which loads JavaScript only.
   */
  importModule?: ImportModule;
}

/**
 * Makes scorers from their specs, checking each now: a CEL expression parses and gives a bool or a number, a regex
 * compiles, a JSON Schema compiles, a judge's model is in the pipeline's `models:`, a module's file exists. Throws an
 * `EvalsError` (`invalid_scorer`) naming the scorer (its place and name) and what is wrong. Scorers are named by
 * their spec's `name`, else by kind and subject (`contains "done"`, `cel: steps.review.rounds <= 2`, `trajectory
 * superset`, `judge (grader)`); a name given twice gets ` #2`, so each score of a case is told apart.
 *
 * @example
 * const scorers = makeScorers(dataset.scorers, { baseDir: dirname(file), pipeline });
 * const scores = await scoreRun(caseRunOf(evalCase, events), scorers, { pipeline, baseDir: dirname(file) });
 */
export function makeScorers(specs: readonly ScorerSpec[], options: MakeScorersOptions): Scorer[] {
  const checkOptions = checkOptionsOf(options);
  const taken = new Map<string, number>();
  return specs.map((spec, index) => {
    const base = spec.name ?? nameOf(spec);
    const seen = (taken.get(base) ?? 0) + 1;
    taken.set(base, seen);
    return madeScorer(spec, index, seen === 1 ? base : `${base} #${seen}`, checkOptions);
  });
}

/**
 * Each scorer of `specs` that cannot be made, by its index there, with the `EvalsError` saying so as `makeScorers`
 * would (`scorer 3 (regex /(/): …`). Each is made alone, so every bad one is found, not only the first: what a
 * pipeline's `evals:` block and a dataset file are checked with.
 */
export function scorerProblems(
  specs: readonly ScorerSpec[],
  options: MakeScorersOptions,
): { index: number; error: EvalsError }[] {
  const checkOptions = checkOptionsOf(options);
  return specs.flatMap((spec, index) => {
    try {
      madeScorer(spec, index, spec.name ?? nameOf(spec), checkOptions);
      return [];
    } catch (error) {
      if (!EvalsError.is(error, 'invalid_scorer')) throw error;
      return [{ index, error }];
    }
  });
}

/** The options a check is made with: a module scorer imported by the importer given, else by the pipeline's. */
function checkOptionsOf(options: MakeScorersOptions): CheckOptions {
  const importModule = options.importModule ?? options.pipeline?.importModule;
  return { ...options, ...(importModule ? { importModule } : {}) };
}

/** The scorer of `specs[index]`, named `name`; an `EvalsError` naming it by both when its spec cannot be used. */
function madeScorer(spec: ScorerSpec, index: number, name: string, options: CheckOptions): Scorer {
  let check: Check;
  try {
    check = checkOf(spec.type, spec, options);
  } catch (error) {
    throw new EvalsError('invalid_scorer', `scorer ${index + 1} (${name}): ${errorMessage(error)}`, {
      cause: error,
    });
  }
  const threshold = spec.threshold ?? DEFAULT_THRESHOLD[spec.type] ?? 1;
  return new SpecScorer(name, spec.type, threshold, spec.timeoutMs ?? SCORER_TIMEOUT_MS, check);
}

/**
 * Scores one run with every scorer, at once; scores come in the scorers' order. A scorer that throws, or takes longer
 * than its time limit (the spec's `timeoutMs`, else {@link SCORER_TIMEOUT_MS}), gives a score of 0 that does not
 * pass, marked `error: true`, its reason `error: …`: the case and its other scores are kept.
 */
export async function scoreRun(
  run: CaseRun,
  scorers: readonly Scorer[],
  context: ScoreContext,
): Promise<Score[]> {
  return Promise.all(
    scorers.map(async (scorer) => {
      try {
        return await scorer.score(run, context);
      } catch (error) {
        return errorScore(scorer.name, scorer.type, 1, error);
      }
    }),
  );
}

/**
 * The system's time for a scorer's time limit when the context gives no clock. Unlike `systemClock`'s, its timers hold
 * the process open: a CLI run whose module scorer never answers ends by the limit, not when nothing else is left.
 */
const HOLDING_CLOCK: Clock = {
  now: () => systemClock.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/**
 * A scorer made from a spec: its check's finding, judged against its threshold. A check still at work when its time
 * limit passes is told to stop (its `signal` aborts: a judge's call ends) and left: the score is an error at once, so
 * a module that never returns holds neither its case nor an online scoring slot.
 */
class SpecScorer implements Scorer {
  readonly name: string;
  readonly type: ScorerSpec['type'];
  readonly #threshold: number;
  readonly #timeoutMs: number;
  readonly #check: Check;

  constructor(name: string, type: ScorerSpec['type'], threshold: number, timeoutMs: number, check: Check) {
    this.name = name;
    this.type = type;
    this.#threshold = threshold;
    this.#timeoutMs = timeoutMs;
    this.#check = check;
  }

  async score(run: CaseRun, context: ScoreContext): Promise<Score> {
    const timedOut = new AbortController();
    const signal = context.signal ? AbortSignal.any([context.signal, timedOut.signal]) : timedOut.signal;
    const clock = context.clock ?? HOLDING_CLOCK;
    let timer: unknown;
    const limit = new Promise<never>((_, reject) => {
      timer = clock.setTimeout(() => {
        const seconds = this.#timeoutMs / 1000;
        reject(new Error(`timed out: no score after ${seconds} s (the scorer's timeoutMs)`));
        timedOut.abort();
      }, this.#timeoutMs);
    });
    try {
      const checking = Promise.resolve().then(() => this.#check(run, { ...context, signal }));
      // A check left at work past its limit may still fail later: that failure is nobody's.
      checking.catch(() => {});
      const { value, reason, costUsd } = await Promise.race([checking, limit]);
      const threshold = this.#threshold;
      return {
        scorer: this.name,
        type: this.type,
        value,
        threshold,
        pass: value >= threshold,
        reason,
        ...(costUsd === undefined ? {} : { costUsd }),
      };
    } catch (error) {
      return errorScore(this.name, this.type, this.#threshold, error);
    } finally {
      clock.clearTimeout(timer);
    }
  }
}

function errorScore(scorer: string, type: string, threshold: number, error: unknown): Score {
  const message = error instanceof Error ? error.message : String(error);
  return {
    scorer,
    type,
    value: 0,
    threshold,
    pass: false,
    reason: `error: ${message}`,
    error: true,
    ...(error instanceof CheckError ? { costUsd: error.costUsd } : {}),
  };
}

/** A spec's check, made by its kind's maker (the spec's `type` picks the maker that takes that spec). */
function checkOf<T extends keyof Specs>(type: T, spec: Specs[T], options: CheckOptions): Check {
  return CHECKS[type](spec, options);
}

/** A scorer's name from its kind and subject, when its spec gives none. */
function nameOf(spec: ScorerSpec): string {
  const name = namedBy(spec.type, spec);
  return name.length <= MAX_NAME ? name : `${name.slice(0, MAX_NAME - 1)}…`;
}

function namedBy<T extends keyof Specs>(type: T, spec: Specs[T]): string {
  return NAMES[type](spec);
}

const NAMES: { [T in keyof Specs]: (spec: Specs[T]) => string } = {
  exact: (spec) => (spec.value === undefined ? 'exact (expected)' : `exact ${JSON.stringify(spec.value)}`),
  contains: (spec) =>
    `contains ${(typeof spec.value === 'string' ? [spec.value] : spec.value).map((v) => JSON.stringify(v)).join(', ')}`,
  regex: (spec) => `regex /${spec.pattern}/${spec.flags ?? ''}`,
  jsonSchema: () => 'jsonSchema',
  cel: (spec) => `cel: ${spec.expr}`,
  trajectory: (spec) => `trajectory ${spec.match}${spec.of === 'steps' ? ' (steps)' : ''}`,
  judge: (spec) => `judge (${spec.model})`,
  safety: () => 'safety',
  module: (spec) => `module ${spec.path}`,
};
