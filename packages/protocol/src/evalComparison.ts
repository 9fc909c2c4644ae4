import { z } from 'zod';
import { CaseResult, EvalMode } from './evals.ts';
import { Name } from './names.ts';

/**
 * Two experiments compared case by case (`troupe eval compare A B`, the gateway's comparison view): what changed in
 * each case from A to B, and a summary that says whether B is better with the uncertainty the case count allows.
 * The rule that makes each case's change and the verdict is written down in @troupe/client's `compareExperiments`.
 */

/**
 * How a case went from A to B: `regressed` (it passed in A and not in B, or its mean score fell), `improved` (the
 * reverse), `unchanged`, `added` (only in B), `removed` (only in A).
 */
export const CaseChange = z.enum(['regressed', 'improved', 'unchanged', 'added', 'removed']);
export type CaseChange = z.infer<typeof CaseChange>;

/** One side of a case: how it ended in that experiment. */
export const CaseSide = z.object({
  status: CaseResult.shape.status,
  /** The mean of its scores' values (0 for a case that errored before any score). */
  meanScore: z.number().min(0).max(1),
  costUsd: z.number().nonnegative(),
  durationMs: z.number().nonnegative(),
  /** The task's id, so its trace opens. */
  taskId: z.string().optional(),
  /** Why the case errored. */
  error: z.string().optional(),
});
export type CaseSide = z.infer<typeof CaseSide>;

/** One scorer's score of one case in A and in B (absent on a side that did not score it). */
export const ScorerComparison = z.object({
  scorer: z.string(),
  type: z.string(),
  a: z.object({ value: z.number(), pass: z.boolean(), reason: z.string() }).optional(),
  b: z.object({ value: z.number(), pass: z.boolean(), reason: z.string() }).optional(),
});
export type ScorerComparison = z.infer<typeof ScorerComparison>;

/** One case compared: its change, each side, the deltas (B − A, when both ran it) and each scorer's values. */
export const CaseComparison = z.object({
  caseId: z.string(),
  change: CaseChange,
  a: CaseSide.optional(),
  b: CaseSide.optional(),
  scoreDelta: z.number().optional(),
  costDeltaUsd: z.number().optional(),
  durationDeltaMs: z.number().optional(),
  scorers: z.array(ScorerComparison),
  /** The change in words: "passed in A, failed in B: exact (…)". */
  reason: z.string(),
});
export type CaseComparison = z.infer<typeof CaseComparison>;

/** What the comparison says of B against A. */
export const EvalVerdict = z.enum(['better', 'worse', 'no clear difference']);
export type EvalVerdict = z.infer<typeof EvalVerdict>;

/** Which experiment a side of the comparison is, without its cases. */
export const ComparedExperiment = z.object({
  id: z.string(),
  dataset: z.object({ name: Name, version: z.number().int().positive() }),
  pipeline: z.object({ name: Name, file: z.string(), hash: z.string() }),
  mode: EvalMode,
  startedAt: z.string(),
});
export type ComparedExperiment = z.infer<typeof ComparedExperiment>;

const AB = z.object({ a: z.number(), b: z.number(), delta: z.number() });

/** Two experiments compared. */
export const EvalComparison = z.object({
  a: ComparedExperiment,
  b: ComparedExperiment,
  cases: z.array(CaseComparison),
  summary: z.object({
    counts: z.object({
      /** Cases both experiments ran, the ones the mean score's delta is measured over. */
      common: z.number().int().nonnegative(),
      regressed: z.number().int().nonnegative(),
      improved: z.number().int().nonnegative(),
      unchanged: z.number().int().nonnegative(),
      added: z.number().int().nonnegative(),
      removed: z.number().int().nonnegative(),
      /** Cases that passed in A and did not in B: each fails a CI gate. */
      passesLost: z.number().int().nonnegative(),
    }),
    /** Cases passed in each experiment, and the share of its cases. */
    passed: AB,
    passRate: AB,
    /** The mean over the common cases of their mean score in A and in B, and B − A. */
    meanScore: AB.extend({
      /**
       * The 95% interval of the delta from a paired bootstrap over the common cases, with a fixed seed so the same
       * experiments give the same interval; absent with no common case.
       */
      interval: z
        .object({
          low: z.number(),
          high: z.number(),
          level: z.number(),
          resamples: z.number().int().positive(),
          seed: z.number().int(),
        })
        .optional(),
    }),
    verdict: EvalVerdict,
    /** The verdict in a sentence, with what the case count can tell. */
    explanation: z.string(),
    /** The tasks' cost in A and in B, B − A and the change in per cent of A's (null when A cost nothing). */
    costUsd: AB.extend({ percent: z.number().nullable() }),
    /** What the judges cost, counted apart. */
    judgeCostUsd: AB,
    /** The cases' median duration. */
    p50Ms: AB,
  }),
});
export type EvalComparison = z.infer<typeof EvalComparison>;
