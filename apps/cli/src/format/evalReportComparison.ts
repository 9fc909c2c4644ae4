import type { CaseChange, CaseComparison, CaseSide, EvalComparison } from '@troupe/protocol';
import { formatDuration } from './duration.ts';
import { type EvalFormat, shortHash } from './evalReport.ts';
import type { GateFailure } from './evalReportGate.ts';
import { markdownCell, markdownTable, oneLine } from './evalReportMarkdown.ts';
import { XML_DECLARATION, xmlElement, xmlText } from './evalReportXml.ts';
import { formatCost } from './runsTable.ts';
import { alignColumns } from './table.ts';

/** A comparison in `format`, with what fails the gate, ending with a newline. */
export function renderComparison(
  comparison: EvalComparison,
  gate: GateFailure[],
  format: EvalFormat,
): string {
  switch (format) {
    case 'table':
      return `${comparisonTable(comparison, gate).join('\n')}\n`;
    case 'json':
      return `${JSON.stringify({ ...comparison, notes: comparisonNotes(comparison), gate: { passed: gate.length === 0, failures: gate } }, null, 2)}\n`;
    case 'junit':
      return `${comparisonJunit(comparison, gate)}\n`;
    case 'markdown':
      return `${comparisonMarkdown(comparison, gate).join('\n')}\n`;
  }
}

/**
 * What a reader of the comparison should know before trusting it: A and B are one experiment (compared with itself),
 * or they ran different datasets (or versions of one), whose cases are matched by id all the same.
 */
export function comparisonNotes(comparison: EvalComparison): string[] {
  const { a, b } = comparison;
  if (a.id === b.id && a.startedAt === b.startedAt) return [`A and B are the same experiment (${a.id})`];
  const datasetA = `${a.dataset.name}@${a.dataset.version}`;
  const datasetB = `${b.dataset.name}@${b.dataset.version}`;
  if (datasetA === datasetB) return [];
  return [
    `A ran dataset ${datasetA} and B ran ${datasetB}: their cases are matched by id across different datasets`,
  ];
}

/** Changes first, the worst first; the dataset's order within each. */
const ORDER: readonly CaseChange[] = ['regressed', 'improved', 'added', 'removed', 'unchanged'];
const sorted = (cases: readonly CaseComparison[]) =>
  [...cases].sort((x, y) => ORDER.indexOf(x.change) - ORDER.indexOf(y.change));

const signed = (n: number, digits = 2) => `${n >= 0 ? '+' : '−'}${Math.abs(n).toFixed(digits)}`;
const signedCost = (usd: number) => `${usd >= 0 ? '+' : '−'}${formatCost(Math.abs(usd))}`;
const signedDuration = (ms: number) => `${ms >= 0 ? '+' : '−'}${formatDuration(Math.abs(ms))}`;
const percent = (share: number) => `${Math.round(share * 100)}%`;
const sideCell = (side: CaseSide | undefined) => (side ? `${side.status} ${side.meanScore.toFixed(2)}` : '-');

/** A comparison as a terminal reads it: a row per case (changes first), then the summary and the gate. */
export function comparisonTable(comparison: EvalComparison, gate: GateFailure[]): string[] {
  const { a, b } = comparison;
  const rows = sorted(comparison.cases).map((c) => [
    c.caseId,
    c.change,
    sideCell(c.a),
    sideCell(c.b),
    c.scoreDelta === undefined ? '' : signed(c.scoreDelta),
    c.costDeltaUsd === undefined ? '' : signedCost(c.costDeltaUsd),
    c.durationDeltaMs === undefined ? '' : signedDuration(c.durationDeltaMs),
    oneLine(c.reason, 80),
  ]);
  return [
    `A ${a.id}: ${a.dataset.name}@${a.dataset.version}, ${a.pipeline.name} (${a.pipeline.file}, ${shortHash(a.pipeline.hash)}), mode ${a.mode}`,
    `B ${b.id}: ${b.dataset.name}@${b.dataset.version}, ${b.pipeline.name} (${b.pipeline.file}, ${shortHash(b.pipeline.hash)}), mode ${b.mode}`,
    ...alignColumns([['CASE', 'CHANGE', 'A', 'B', 'ΔSCORE', 'ΔCOST', 'ΔDURATION', 'WHY'], ...rows], {
      right: [4, 5, 6],
    }),
    ...summaryLines(comparison),
    gateLine(gate),
  ];
}

function summaryLines(comparison: EvalComparison): string[] {
  const s = comparison.summary;
  const casesA = s.counts.common + s.counts.removed;
  const casesB = s.counts.common + s.counts.added;
  return [
    `verdict: ${s.verdict} — ${s.explanation}`,
    ...comparisonNotes(comparison).map((note) => `note: ${note}`),
    `cases: ${s.counts.common} in both (${s.counts.regressed} regressed, ${s.counts.improved} improved, ${s.counts.unchanged} unchanged), ${s.counts.added} added, ${s.counts.removed} removed`,
    `passed: ${s.passed.a}/${casesA} (${percent(s.passRate.a)}) → ${s.passed.b}/${casesB} (${percent(s.passRate.b)})`,
    `mean score: ${s.meanScore.a.toFixed(2)} → ${s.meanScore.b.toFixed(2)} (${signed(s.meanScore.delta)}${intervalText(comparison)})`,
    `cost: ${formatCost(s.costUsd.a)} → ${formatCost(s.costUsd.b)} (${signedCost(s.costUsd.delta)}${s.costUsd.percent === null ? '' : `, ${signed(s.costUsd.percent, 0)}%`}); judges ${formatCost(s.judgeCostUsd.a)} → ${formatCost(s.judgeCostUsd.b)}`,
    `p50 latency: ${formatDuration(s.p50Ms.a)} → ${formatDuration(s.p50Ms.b)} (${signedDuration(s.p50Ms.delta)})`,
  ];
}

function intervalText(comparison: EvalComparison): string {
  const i = comparison.summary.meanScore.interval;
  if (!i) return '';
  return `, 95% interval [${signed(i.low)}, ${signed(i.high)}] by a paired bootstrap over ${comparison.summary.counts.common} cases, ${i.resamples} resamples, seed ${i.seed}`;
}

function gateLine(gate: GateFailure[]): string {
  if (gate.length === 0) return 'gate: passed';
  return `gate: FAILED — ${gate.map((g) => (g.caseId ? `${g.caseId}: ${oneLine(g.message, 120)}` : g.message)).join('; ')}`;
}

/**
 * A comparison as JUnit XML: a testcase per case, a `<failure>` for each that regressed (passed in A and not in B,
 * or its score fell) and for each other check of the gate that fails (the mean score, the cost); cases only in A
 * are skipped.
 */
export function comparisonJunit(comparison: EvalComparison, gate: GateFailure[]): string {
  const indent = '    ';
  const testcases = comparison.cases.map((c) => {
    const children =
      c.change === 'regressed'
        ? [
            xmlText(
              'failure',
              { message: oneLine(c.reason, 500), type: 'regressed' },
              c.reason,
              `${indent}  `,
            ),
          ]
        : c.change === 'removed'
          ? [xmlElement('skipped', { message: 'only in A' }, [], `${indent}  `)]
          : [];
    return xmlElement(
      'testcase',
      { name: c.caseId, classname: `compare.${comparison.a.dataset.name}`, time: '0.000' },
      children,
      indent,
    );
  });
  const checks = gate
    .filter((g) => g.check !== 'lost pass')
    .map((g) =>
      xmlElement(
        'testcase',
        { name: `(${g.check})`, classname: 'compare.summary', time: '0.000' },
        [xmlText('failure', { message: oneLine(g.message, 500), type: g.check }, g.message, `${indent}  `)],
        indent,
      ),
    );
  const failures = comparison.summary.counts.regressed + checks.length;
  const tests = comparison.cases.length + checks.length;
  const name = `${comparison.a.id} → ${comparison.b.id}`;
  const properties = xmlElement(
    'properties',
    {},
    Object.entries({
      verdict: comparison.summary.verdict,
      explanation: comparison.summary.explanation,
      ...Object.fromEntries(comparisonNotes(comparison).map((note, at) => [`note.${at + 1}`, note])),
      'meanScore.delta': comparison.summary.meanScore.delta.toFixed(4),
      'costUsd.delta': comparison.summary.costUsd.delta.toFixed(6),
    }).map(([key, value]) => xmlElement('property', { name: key, value }, [], `${indent}  `)),
    indent,
  );
  return [
    XML_DECLARATION,
    xmlElement('testsuites', { name: 'troupe eval compare', tests, failures, errors: 0 }, [
      xmlElement(
        'testsuite',
        {
          name,
          tests,
          failures,
          errors: 0,
          skipped: comparison.summary.counts.removed,
          timestamp: comparison.b.startedAt,
        },
        [properties, ...testcases, ...checks],
        '  ',
      ),
    ]),
  ].join('\n');
}

const VERDICT_MARK: Readonly<Record<EvalComparison['summary']['verdict'], string>> = {
  better: '🟢 better',
  worse: '🔴 worse',
  'no clear difference': '⚪ no clear difference',
};

/** A comparison in Markdown, for a pull request's comment: the verdict, the summary, what changed, every case. */
export function comparisonMarkdown(comparison: EvalComparison, gate: GateFailure[]): string[] {
  const { a, b, summary: s } = comparison;
  const casesA = s.counts.common + s.counts.removed;
  const casesB = s.counts.common + s.counts.added;
  const interval = s.meanScore.interval;
  const summaryRows = [
    [
      'Passed',
      `${s.passed.a}/${casesA} (${percent(s.passRate.a)})`,
      `${s.passed.b}/${casesB} (${percent(s.passRate.b)})`,
      signed(s.passed.delta, 0),
    ],
    [
      'Mean score',
      s.meanScore.a.toFixed(2),
      s.meanScore.b.toFixed(2),
      `${signed(s.meanScore.delta)}${interval ? ` [${signed(interval.low)}, ${signed(interval.high)}]` : ''}`,
    ],
    [
      'Cost',
      formatCost(s.costUsd.a),
      formatCost(s.costUsd.b),
      `${signedCost(s.costUsd.delta)}${s.costUsd.percent === null ? '' : ` (${signed(s.costUsd.percent, 0)}%)`}`,
    ],
    [
      'Judge cost',
      formatCost(s.judgeCostUsd.a),
      formatCost(s.judgeCostUsd.b),
      signedCost(s.judgeCostUsd.delta),
    ],
    ['p50 latency', formatDuration(s.p50Ms.a), formatDuration(s.p50Ms.b), signedDuration(s.p50Ms.delta)],
  ];
  const changed = (change: CaseChange, title: string) => {
    const cases = comparison.cases.filter((c) => c.change === change);
    if (cases.length === 0) return [];
    return [
      '',
      `#### ${title} (${cases.length})`,
      '',
      ...markdownTable(
        ['Case', 'A', 'B', 'Δ score', 'Why'],
        cases.map((c) => [
          c.caseId,
          sideCell(c.a),
          sideCell(c.b),
          c.scoreDelta === undefined ? '' : signed(c.scoreDelta),
          oneLine(c.reason, 200),
        ]),
        [3],
      ),
    ];
  };
  return [
    `### Eval: ${VERDICT_MARK[s.verdict]} — \`${markdownCell(b.id)}\` against \`${markdownCell(a.id)}\``,
    '',
    markdownCell(s.explanation),
    '',
    ...comparisonNotes(comparison).flatMap((note) => [`**Note:** ${markdownCell(note)}`, '']),
    gate.length === 0
      ? '**Gate: passed.**'
      : `**Gate: failed.** ${gate.map((g) => markdownCell(g.caseId ? `${g.caseId}: ${oneLine(g.message, 160)}` : g.message)).join('; ')}`,
    '',
    ...markdownTable(['', 'A', 'B', 'Δ'], summaryRows, [1, 2, 3]),
    ...changed('regressed', 'Regressions'),
    ...changed('improved', 'Improvements'),
    ...changed('added', 'Added'),
    ...changed('removed', 'Removed'),
    '',
    `<details><summary>All ${comparison.cases.length} cases</summary>`,
    '',
    ...markdownTable(
      ['Case', 'Change', 'A', 'B', 'Δ score', 'Δ cost', 'Δ duration'],
      sorted(comparison.cases).map((c) => [
        c.caseId,
        c.change,
        sideCell(c.a),
        sideCell(c.b),
        c.scoreDelta === undefined ? '' : signed(c.scoreDelta),
        c.costDeltaUsd === undefined ? '' : signedCost(c.costDeltaUsd),
        c.durationDeltaMs === undefined ? '' : signedDuration(c.durationDeltaMs),
      ]),
      [4, 5, 6],
    ),
    '',
    '</details>',
    '',
    `<sub>A: ${markdownCell(a.dataset.name)}@${a.dataset.version}, ${markdownCell(a.pipeline.name)} \`${shortHash(a.pipeline.hash)}\`, ${a.mode}. B: ${markdownCell(b.dataset.name)}@${b.dataset.version}, ${markdownCell(b.pipeline.name)} \`${shortHash(b.pipeline.hash)}\`, ${b.mode}.${interval ? ` Interval: 95%, paired bootstrap over ${s.counts.common} common cases, ${interval.resamples} resamples, seed ${interval.seed}.` : ''}</sub>`,
  ];
}
