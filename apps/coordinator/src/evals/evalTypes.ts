import type { EvalCase, Score, ScorerSpec, TroupeEvent, UsageTotals } from '@troupe/protocol';
import type { Clock } from '@troupe/runtime';
import type { LoadedPipeline } from '../config/loadPipeline.ts';

/**
 * What a case's run gave, as scorers read it: the run's events (a replay's, a model run's or a live task's) and what
 * they add up to. Made from events alone (`caseRunOf`), so a recorded task, a replay and a task that just ended on
 * the server are scored the same way.
 */
export interface CaseRun {
  /** The case that was run; an online score's is made from the task (its goal and input, no expectations). */
  case: EvalCase;
  taskId: string;
  events: readonly TroupeEvent[];
  /** How the task ended. */
  status: 'completed' | 'failed' | 'cancelled';
  /** The task's output (whole, when it was stored apart), or undefined when it did not complete. */
  output: string | undefined;
  usage: UsageTotals;
  durationMs: number;
}

/** What scoring needs besides the run. */
export interface ScoreContext {
  /** The pipeline the case ran on: a judge's `model` is one of its `models:`. */
  pipeline: LoadedPipeline;
  /** Where a `module` scorer's relative path is read from: the eval file's folder, or the working directory. */
  baseDir: string;
  /** Environment for model keys (a judge's); `process.env` when absent. */
  env?: Readonly<Record<string, string | undefined>>;
  signal?: AbortSignal;
  /**
   * Times each scorer's limit (`timeoutMs`): a test's simulated clock, or the caller's. Absent, the system's time,
   * whose timers hold the process open until the limit.
   */
  clock?: Clock;
}

/** A scorer made from its spec, ready to score runs. */
export interface Scorer {
  /** The name its scores are reported by (the spec's `name`, or one made from its type and subject). */
  readonly name: string;
  readonly type: ScorerSpec['type'];
  score(run: CaseRun, context: ScoreContext): Promise<Score>;
}

/**
 * What a `module` scorer's module exports: `score`, given the run and the spec's `options`, answers a value from 0
 * to 1 (or a boolean) and, if it likes, why. A thrown error gives an error score (value 0, its message as the
 * reason); the case and its other scores stay.
 */
export interface ScorerModule {
  score(run: CaseRun, options: Readonly<Record<string, unknown>>): ScoreAnswer | Promise<ScoreAnswer>;
}
export type ScoreAnswer = number | boolean | { value: number | boolean; reason?: string };
