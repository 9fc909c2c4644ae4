/**
 * Experiments and their comparison as the gateway serves them (`GET /v1/evals/experiments`, `GET /v1/evals/compare`;
 * the shapes are protocol's `ExperimentSummary` and `EvalComparison`), and what the dashboard's views say of them.
 */

export interface ExperimentSummary {
  id: string;
  dataset: { name: string; version: number };
  pipeline: { name: string; hash: string };
  mode: 'replay' | 'model' | 'live';
  startedAt: string;
  totals: {
    cases: number;
    passed: number;
    failed: number;
    errored: number;
    skipped: number;
    meanScore: number;
    costUsd: number;
    judgeCostUsd: number;
    p50Ms: number;
    p90Ms: number;
  };
}

export type CaseStatus = 'passed' | 'failed' | 'error';
export type CaseChange = 'regressed' | 'improved' | 'unchanged' | 'added' | 'removed';

export interface CaseSide {
  status: CaseStatus;
  meanScore: number;
  costUsd: number;
  durationMs: number;
  taskId?: string;
  error?: string;
}

export interface ScorerValue {
  value: number;
  pass: boolean;
  reason: string;
}

export interface CaseComparison {
  caseId: string;
  change: CaseChange;
  a?: CaseSide;
  b?: CaseSide;
  scoreDelta?: number;
  costDeltaUsd?: number;
  durationDeltaMs?: number;
  scorers: { scorer: string; type: string; a?: ScorerValue; b?: ScorerValue }[];
  reason: string;
}

interface AB {
  a: number;
  b: number;
  delta: number;
}

export interface ComparedExperiment {
  id: string;
  dataset: { name: string; version: number };
  pipeline: { name: string; file: string; hash: string };
  mode: string;
  startedAt: string;
}

export interface EvalComparison {
  a: ComparedExperiment;
  b: ComparedExperiment;
  cases: CaseComparison[];
  summary: {
    counts: Record<
      'common' | 'regressed' | 'improved' | 'unchanged' | 'added' | 'removed' | 'passesLost',
      number
    >;
    passed: AB;
    passRate: AB;
    meanScore: AB & {
      interval?: { low: number; high: number; level: number; resamples: number; seed: number };
    };
    verdict: 'better' | 'worse' | 'no clear difference';
    explanation: string;
    costUsd: AB & { percent: number | null };
    judgeCostUsd: AB;
    p50Ms: AB;
  };
}

/** `82%`: a share of 0 to 1 in whole per cent. */
export const percent = (share: number): string => `${Math.round(share * 100)}%`;

/** An experiment's pass rate: its passed cases over the cases it ran (`–` when it ran none). */
export const passRate = (t: ExperimentSummary['totals']): string =>
  t.cases === 0 ? '–' : `${percent(t.passed / t.cases)} (${t.passed}/${t.cases})`;

/** A signed difference: `+0.25`, `−0.10`, `±0.00`; `digits` after the point. */
export function signed(delta: number, digits = 2): string {
  const text = Math.abs(delta).toFixed(digits);
  if (Number(text) === 0) return `±${text}`;
  return `${delta > 0 ? '+' : '−'}${text}`;
}

/** A cost difference in dollars: `+$0.0120`, `−$0.0040`. */
export function signedCost(delta: number): string {
  const text = Math.abs(delta).toFixed(4);
  if (Number(text) === 0) return `±$${text}`;
  return `${delta > 0 ? '+' : '−'}$${text}`;
}

/** The summary's cost line: A, B and the change, in per cent of A's where A cost something. */
export function costChange(cost: EvalComparison['summary']['costUsd']): string {
  const share =
    cost.percent === null ? '' : ` (${cost.percent >= 0 ? '+' : '−'}${Math.abs(cost.percent).toFixed(1)}%)`;
  return `$${cost.a.toFixed(4)} → $${cost.b.toFixed(4)}, ${signedCost(cost.delta)}${share}`;
}

/** The mean score's change with its interval: `0.92 → 0.75, −0.17 (95% interval −0.33 to −0.02)`. */
export function scoreChange(mean: EvalComparison['summary']['meanScore']): string {
  const interval = mean.interval
    ? ` (${Math.round(mean.interval.level * 100)}% interval ${signed(mean.interval.low)} to ${signed(mean.interval.high)})`
    : '';
  return `${mean.a.toFixed(2)} → ${mean.b.toFixed(2)}, ${signed(mean.delta)}${interval}`;
}

/**
 * The scorers whose verdict or value differs between A and B, or that scored the case on one side only: what the
 * case row names as having changed.
 */
export function changedScorers(c: CaseComparison): string[] {
  return c.scorers
    .filter((s) => s.a === undefined || s.b === undefined || s.a.pass !== s.b.pass || s.a.value !== s.b.value)
    .map((s) => {
      if (!s.a) return `${s.scorer} (new)`;
      if (!s.b) return `${s.scorer} (gone)`;
      if (s.a.pass !== s.b.pass) return `${s.scorer} ${s.a.pass ? 'pass→fail' : 'fail→pass'}`;
      return `${s.scorer} ${s.a.value.toFixed(2)}→${s.b.value.toFixed(2)}`;
    });
}

/**
 * The side whose timeline a case opens first: B's, the run judged; A's for a case B did not run.
 */
export const firstSide = (c: CaseComparison): 'a' | 'b' => (c.b ? 'b' : 'a');

/** The order a comparison's cases are listed in: regressions first, then improvements, the rest by id. */
const ORDER: Record<CaseChange, number> = { regressed: 0, improved: 1, added: 2, removed: 3, unchanged: 4 };
export const byChange = (x: CaseComparison, y: CaseComparison): number =>
  ORDER[x.change] - ORDER[y.change] || x.caseId.localeCompare(y.caseId);

/** A task's online score (`eval.scored`), as `GET /v1/evals/scores` gives it. */
export interface TaskScore {
  taskId: string;
  pipeline: string;
  ts: string;
  status: string;
  pass: boolean;
  meanScore: number;
  scorers: number;
  failed: string[];
  error?: string;
}

/** A task's score from its `eval.scored` event as the live stream brings it, as the gateway gives it. */
export function scoreOfEvent(event: {
  taskId: string;
  pipeline: string;
  ts: string;
  data: Record<string, unknown>;
}): TaskScore {
  const scores = Array.isArray(event.data.scores)
    ? (event.data.scores as { scorer: string; value: number; pass: boolean }[])
    : [];
  const error = typeof event.data.error === 'string' ? event.data.error : undefined;
  return {
    taskId: event.taskId,
    pipeline: event.pipeline,
    ts: event.ts,
    status: String(event.data.status ?? ''),
    pass: event.data.pass === true,
    meanScore: scores.length === 0 ? 0 : scores.reduce((sum, s) => sum + s.value, 0) / scores.length,
    scorers: scores.length,
    failed: scores.filter((s) => !s.pass).map((s) => s.scorer),
    ...(error === undefined ? {} : { error }),
  };
}

/** What a task's score cell says on hover: which scorers failed, or why it could not be scored. */
export function scoreTitle(score: TaskScore): string {
  if (score.error) return `not scored: ${score.error}`;
  const of = `${score.scorers - score.failed.length} of ${score.scorers} scorers passed`;
  return score.failed.length === 0 ? of : `${of}; failed: ${score.failed.join(', ')}`;
}
