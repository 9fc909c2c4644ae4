import type {
  CaseChange,
  CaseComparison,
  CaseResult,
  CaseSide,
  ComparedExperiment,
  EvalComparison,
  EvalVerdict,
  Experiment,
  ScorerComparison,
} from '@troupe/protocol';

/** The bootstrap's seed: fixed, so the same two experiments always give the same interval (and say which seed). */
export const COMPARE_SEED = 34;
/** Resamples of the bootstrap: enough for the 2.5th and 97.5th percentiles to settle to two decimals. */
export const COMPARE_RESAMPLES = 10_000;
/** Score differences smaller than this are rounding, not change. */
const EPSILON = 1e-9;

/**
 * Compares experiment B with experiment A case by case (cases are matched by their id) and sums it up.
 *
 * A case that both ran is `regressed` when it passed in A and not in B, `improved` when it did not pass in A and
 * passes in B; when it passed (or not) in both, its mean score decides: fell is `regressed`, rose is `improved`,
 * else `unchanged`. A case only in B is `added`, only in A `removed`; neither counts towards the verdict.
 *
 * The mean score's delta (B − A over the common cases) comes with a 95% interval from a paired bootstrap: the
 * common cases are drawn with replacement {@link COMPARE_RESAMPLES} times by a PRNG seeded with
 * {@link COMPARE_SEED}, and the 2.5th and 97.5th percentiles of the resampled mean deltas bound it. The verdict,
 * the first rule that holds:
 * 1. the interval lies below 0: `worse`;
 * 2. a case that passed in A does not pass in B: `worse` (a lost pass fails a CI gate whatever the mean does);
 * 3. the interval lies above 0: `better`;
 * 4. some cases' scores fell and none rose: `worse` (B is nowhere better);
 * 5. some cases improved and none regressed: `better` (B is nowhere worse);
 * 6. else (nothing changed, or scores moved both ways within the interval) `no clear difference`, with the
 *    interval's half-width as the smallest difference the case count can tell from chance.
 *
 * Pure: the same two experiments give the same comparison.
 */
export function compareExperiments(a: Experiment, b: Experiment): EvalComparison {
  const inB = new Map(b.cases.map((c) => [c.caseId, c]));
  const inA = new Map(a.cases.map((c) => [c.caseId, c]));
  const cases: CaseComparison[] = [];
  for (const caseA of a.cases) cases.push(compareCase(caseA, inB.get(caseA.caseId)));
  for (const caseB of b.cases) if (!inA.has(caseB.caseId)) cases.push(compareCase(undefined, caseB));

  const common = cases.filter((c) => c.a !== undefined && c.b !== undefined);
  const count = (change: CaseChange) => cases.filter((c) => c.change === change).length;
  const passesLost = common.filter((c) => c.a?.status === 'passed' && c.b?.status !== 'passed').length;
  const scoresA = common.map((c) => c.a?.meanScore ?? 0);
  const scoresB = common.map((c) => c.b?.meanScore ?? 0);
  const meanA = mean(scoresA);
  const meanB = mean(scoresB);
  const interval =
    common.length === 0 ? undefined : bootstrapInterval(scoresB.map((s, i) => s - (scoresA[i] ?? 0)));
  const counts = {
    common: common.length,
    regressed: count('regressed'),
    improved: count('improved'),
    unchanged: count('unchanged'),
    added: count('added'),
    removed: count('removed'),
    passesLost,
  };
  const { verdict, explanation } = judge(counts, interval);
  const costA = a.totals.costUsd;
  const costB = b.totals.costUsd;
  const passedA = a.cases.filter((c) => c.status === 'passed').length;
  const passedB = b.cases.filter((c) => c.status === 'passed').length;
  return {
    a: comparedExperiment(a),
    b: comparedExperiment(b),
    cases,
    summary: {
      counts,
      passed: { a: passedA, b: passedB, delta: passedB - passedA },
      passRate: ab(rate(passedA, a.cases.length), rate(passedB, b.cases.length)),
      meanScore: { ...ab(meanA, meanB), ...(interval ? { interval } : {}) },
      verdict,
      explanation,
      costUsd: { ...ab(costA, costB), percent: costA > 0 ? ((costB - costA) / costA) * 100 : null },
      judgeCostUsd: ab(a.totals.judgeCostUsd, b.totals.judgeCostUsd),
      p50Ms: ab(a.totals.p50Ms, b.totals.p50Ms),
    },
  };
}

/** A case's mean score: the mean of its scores' values; with no score, 1 if it passed and 0 if not. */
export function caseMeanScore(result: CaseResult): number {
  if (result.scores.length === 0) return result.status === 'passed' ? 1 : 0;
  return mean(result.scores.map((s) => s.value));
}

type Interval = NonNullable<EvalComparison['summary']['meanScore']['interval']>;

/**
 * Whether a mean score's interval lies below 0: beyond rounding, so scores summed in another order (about 1e-17
 * apart) have not fallen. The verdict's rule 1 and `troupe eval compare`'s gate both read it.
 */
export function meanScoreFell(interval: Interval): boolean {
  return interval.high < -EPSILON;
}

function judge(
  counts: EvalComparison['summary']['counts'],
  interval: Interval | undefined,
): { verdict: EvalVerdict; explanation: string } {
  const lost = counts.passesLost;
  if (interval && meanScoreFell(interval))
    return { verdict: 'worse', explanation: `${meanSentence(interval, counts.common)}: B scores lower.` };
  if (lost > 0)
    return {
      verdict: 'worse',
      explanation: `${plural(lost, 'case')} that passed in A ${lost === 1 ? 'fails' : 'fail'} in B.`,
    };
  if (interval && interval.low > EPSILON)
    return { verdict: 'better', explanation: `${meanSentence(interval, counts.common)}: B scores higher.` };
  if (counts.regressed > 0 && counts.improved === 0)
    return {
      verdict: 'worse',
      explanation: `${plural(counts.regressed, 'case')} scored lower in B and none higher; ${tellable(interval, counts.common)}.`,
    };
  if (counts.improved > 0 && counts.regressed === 0)
    return {
      verdict: 'better',
      explanation: `${plural(counts.improved, 'case')} improved and none regressed; ${tellable(interval, counts.common)}.`,
    };
  if (!interval)
    return { verdict: 'no clear difference', explanation: 'The experiments have no case in common.' };
  const moved =
    counts.regressed > 0
      ? `${plural(counts.improved, 'case')} improved and ${counts.regressed} regressed`
      : 'No case changed';
  return { verdict: 'no clear difference', explanation: `${moved}; ${tellable(interval, counts.common)}.` };
}

function meanSentence(interval: Interval, common: number): string {
  return `the mean score's 95% interval over ${plural(common, 'common case')} is [${signed(interval.low)}, ${signed(interval.high)}]`;
}

/** What the case count can tell: the interval's half-width is the smallest difference it tells from chance. */
function tellable(interval: Interval | undefined, common: number): string {
  if (!interval) return 'no case in common to measure the mean score over';
  const half = (interval.high - interval.low) / 2;
  if (half <= EPSILON && Math.abs(interval.low) <= EPSILON)
    return `each of the ${plural(common, 'common case')} scored the same in A and B`;
  if (half <= EPSILON)
    return `each of the ${plural(common, 'common case')} changed its score by the same amount, so the interval has no width`;
  return `with ${plural(common, 'case')} a difference under ±${half.toFixed(2)} in mean score cannot be told`;
}

function compareCase(a: CaseResult | undefined, b: CaseResult | undefined): CaseComparison {
  const sideA = a ? side(a) : undefined;
  const sideB = b ? side(b) : undefined;
  const scorers = scorerValues(a, b);
  const id = (a ?? b)?.caseId ?? '';
  if (!sideA || !sideB) {
    return {
      caseId: id,
      change: sideA ? 'removed' : 'added',
      ...(sideA ? { a: sideA } : {}),
      ...(sideB ? { b: sideB } : {}),
      scorers,
      reason: sideA ? 'only in A' : `only in B (${sideB?.status})`,
    };
  }
  const scoreDelta = sideB.meanScore - sideA.meanScore;
  const passA = sideA.status === 'passed';
  const passB = sideB.status === 'passed';
  let change: CaseChange = 'unchanged';
  if (passA && !passB) change = 'regressed';
  else if (!passA && passB) change = 'improved';
  else if (scoreDelta < -EPSILON) change = 'regressed';
  else if (scoreDelta > EPSILON) change = 'improved';
  return {
    caseId: id,
    change,
    a: sideA,
    b: sideB,
    scoreDelta,
    costDeltaUsd: sideB.costUsd - sideA.costUsd,
    durationDeltaMs: sideB.durationMs - sideA.durationMs,
    scorers,
    reason: reasonOf(change, sideA, sideB, scorers),
  };
}

function reasonOf(change: CaseChange, a: CaseSide, b: CaseSide, scorers: ScorerComparison[]): string {
  if (a.status !== b.status) {
    const why =
      b.status === 'error'
        ? (b.error ?? 'error')
        : scorers
            .filter((s) => s.b && !s.b.pass)
            .map((s) => `${s.scorer} (${s.b?.reason})`)
            .join('; ');
    return `${a.status} in A, ${b.status} in B${why ? `: ${why}` : ''}`;
  }
  if (change === 'unchanged') return `${b.status} in both, same score`;
  const moved = scorers
    .filter((s) => s.a && s.b && Math.abs(s.b.value - s.a.value) > EPSILON)
    .map((s) => `${s.scorer} ${s.a?.value.toFixed(2)} → ${s.b?.value.toFixed(2)}`);
  return `${b.status} in both, mean score ${a.meanScore.toFixed(2)} → ${b.meanScore.toFixed(2)}${moved.length ? ` (${moved.join(', ')})` : ''}`;
}

function side(result: CaseResult): CaseSide {
  return {
    status: result.status,
    meanScore: caseMeanScore(result),
    costUsd: result.usage.costUsd,
    durationMs: result.durationMs,
    ...(result.taskId !== undefined ? { taskId: result.taskId } : {}),
    ...(result.error !== undefined ? { error: result.error } : {}),
  };
}

/** Each scorer of the case, in A's order and then B's new ones, with its value on each side. */
function scorerValues(a: CaseResult | undefined, b: CaseResult | undefined): ScorerComparison[] {
  const byName = new Map<string, ScorerComparison>();
  for (const [key, result] of [
    ['a', a],
    ['b', b],
  ] as const) {
    for (const score of result?.scores ?? []) {
      const entry = byName.get(score.scorer) ?? { scorer: score.scorer, type: score.type };
      entry[key] = { value: score.value, pass: score.pass, reason: score.reason };
      byName.set(score.scorer, entry);
    }
  }
  return [...byName.values()];
}

/** The percentile bootstrap of the mean of paired differences, by a seeded PRNG. */
function bootstrapInterval(deltas: readonly number[]): Interval {
  const random = mulberry32(COMPARE_SEED);
  const n = deltas.length;
  const means = new Float64Array(COMPARE_RESAMPLES);
  for (let r = 0; r < COMPARE_RESAMPLES; r++) {
    let sum = 0;
    for (let i = 0; i < n; i++) sum += deltas[Math.floor(random() * n)] ?? 0;
    means[r] = sum / n;
  }
  means.sort();
  const at = (q: number) => means[Math.min(COMPARE_RESAMPLES - 1, Math.floor(q * COMPARE_RESAMPLES))] ?? 0;
  return {
    low: at(0.025),
    high: at(0.975),
    level: 0.95,
    resamples: COMPARE_RESAMPLES,
    seed: COMPARE_SEED,
  };
}

/** A small, well-mixed 32-bit PRNG: the same seed gives the same sequence on every platform. */
function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

function comparedExperiment(e: Experiment): ComparedExperiment {
  return {
    id: e.id,
    dataset: e.dataset,
    pipeline: { name: e.pipeline.name, file: e.pipeline.file, hash: e.pipeline.hash },
    mode: e.mode,
    startedAt: e.startedAt,
  };
}

const ab = (a: number, b: number) => ({ a, b, delta: b - a });
const mean = (values: readonly number[]) =>
  values.length === 0 ? 0 : values.reduce((sum, v) => sum + v, 0) / values.length;
const rate = (passed: number, total: number) => (total === 0 ? 0 : passed / total);
const plural = (n: number, noun: string) => `${n} ${noun}${n === 1 ? '' : 's'}`;
/** `+0.25` or `−0.25` (a minus sign, as the CLI's tables print it). */
const signed = (n: number) => `${n >= 0 ? '+' : '−'}${Math.abs(n).toFixed(2)}`;
