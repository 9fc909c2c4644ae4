import type { CaseResult, Experiment, Score } from '@troupe/protocol';

/** A score of `value` that passes at 1. */
export const score = (
  scorer: string,
  value: number,
  reason = value >= 1 ? 'holds' : `${scorer} failed`,
): Score => ({
  scorer,
  type: scorer.split(':')[0] ?? scorer,
  value,
  threshold: 1,
  pass: value >= 1,
  reason,
});

/** A case's result; its status follows from its scores unless `error` is given. */
export function caseResult(
  caseId: string,
  scores: Score[],
  extra: Partial<CaseResult> & { costUsd?: number } = {},
): CaseResult {
  const { costUsd = 0.01, ...rest } = extra;
  return {
    caseId,
    status: rest.error ? 'error' : scores.every((s) => s.pass) ? 'passed' : 'failed',
    taskId: `eval-${caseId.replace(/[^A-Za-z0-9_-]/g, '_')}`,
    taskStatus: 'completed',
    scores,
    usage: { inputTokens: 100, outputTokens: 20, cachedTokens: 0, costUsd, modelCalls: 2 },
    durationMs: 1200,
    tools: [],
    steps: [],
    ...rest,
  };
}

/** An experiment of these cases, its totals summed from them. */
export function experimentOf(
  id: string,
  cases: CaseResult[],
  hash = `sha-${id}-0123456789abcdef`,
): Experiment {
  const mean = (xs: number[]) => (xs.length === 0 ? 0 : xs.reduce((s, x) => s + x, 0) / xs.length);
  return {
    id,
    dataset: { name: 'notes', version: 2 },
    pipeline: { name: 'notes', file: 'examples/evals/notes.yaml', hash, models: {} },
    mode: 'replay',
    startedAt: '2026-12-07T06:30:00.000Z',
    durationMs: 4321,
    cases,
    totals: {
      cases: cases.length,
      passed: cases.filter((c) => c.status === 'passed').length,
      failed: cases.filter((c) => c.status === 'failed').length,
      errored: cases.filter((c) => c.status === 'error').length,
      skipped: 0,
      meanScore: mean(cases.map((c) => (c.scores.length ? mean(c.scores.map((s) => s.value)) : 0))),
      costUsd: cases.reduce((s, c) => s + c.usage.costUsd, 0),
      judgeCostUsd: 0.004,
      p50Ms: 1200,
      p90Ms: 1200,
    },
  };
}
