import type { Score } from '@troupe/protocol';
import type { CaseRun } from './evalTypes.ts';

/**
 * Whether a scored run passes: its task completed and each of its scores passed. A run with no scores (a dataset
 * and case with no scorers) is judged by its task's end alone, so a failed or cancelled task never passes. An
 * experiment's case and an online score read the same rule.
 */
export function runPasses(status: CaseRun['status'], scores: readonly Score[]): boolean {
  return status === 'completed' && scores.every((score) => score.pass);
}
