import { meanScoreFell } from '@troupe/client';
import type { EvalComparison } from '@troupe/protocol';

/** A number to two decimals with a minus sign (U+2212) as the report's tables print it. */
const minusSigned = (n: number) => `${n < 0 ? '−' : ''}${Math.abs(n).toFixed(2)}`;

/** Why a comparison fails a CI gate: a check's name and what it found. */
export interface GateFailure {
  check: 'lost pass' | 'mean score' | 'cost';
  /** The case, for a lost pass. */
  caseId?: string;
  message: string;
}

export interface GateOptions {
  /** The most B's cost may rise over A's, in per cent; unchecked when absent. */
  maxCostIncreasePct?: number;
}

/**
 * What fails `troupe eval compare`'s gate (exit code 1): each case that passed in A and does not pass in B, a mean
 * score whose 95% interval lies below 0 (beyond rounding, as the verdict reads it: {@link meanScoreFell}), and with `maxCostIncreasePct` a cost rise beyond it (any rise from nothing
 * is beyond it). A case whose score fell but still passes, and an added or removed case, do not fail it.
 */
export function comparisonGate(comparison: EvalComparison, options: GateOptions = {}): GateFailure[] {
  const failures: GateFailure[] = [];
  for (const c of comparison.cases) {
    if (c.a?.status === 'passed' && c.b !== undefined && c.b.status !== 'passed')
      failures.push({ check: 'lost pass', caseId: c.caseId, message: c.reason });
  }
  const { meanScore, costUsd } = comparison.summary;
  if (meanScore.interval && meanScoreFell(meanScore.interval)) {
    failures.push({
      check: 'mean score',
      message: `the mean score fell by ${(-meanScore.delta).toFixed(2)}, 95% interval [${minusSigned(meanScore.interval.low)}, ${minusSigned(meanScore.interval.high)}]`,
    });
  }
  const max = options.maxCostIncreasePct;
  if (max !== undefined && costUsd.delta > 0) {
    const over = costUsd.percent === null || costUsd.percent > max;
    if (over)
      failures.push({
        check: 'cost',
        message:
          costUsd.percent === null
            ? `the cost rose from nothing to $${costUsd.b.toFixed(4)} (at most +${max}% allowed)`
            : `the cost rose by ${costUsd.percent.toFixed(1)}% ($${costUsd.a.toFixed(4)} → $${costUsd.b.toFixed(4)}), more than the +${max}% allowed`,
      });
  }
  return failures;
}
