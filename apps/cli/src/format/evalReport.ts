import { caseMeanScore } from '@troupe/client';
import type { CaseResult, Experiment, Score } from '@troupe/protocol';
import { formatDuration } from './duration.ts';
import { markdownCell, markdownTable, oneLine } from './evalReportMarkdown.ts';
import { junitSeconds, XML_DECLARATION, xmlElement, xmlText } from './evalReportXml.ts';
import { formatCost } from './runsTable.ts';
import { alignColumns } from './table.ts';

/** The formats `troupe eval run`, `show` and `compare` print in. */
export const EVAL_FORMATS = ['table', 'json', 'junit', 'markdown'] as const;
export type EvalFormat = (typeof EVAL_FORMATS)[number];

/** An experiment in `format`, ending with a newline. */
export function renderExperiment(experiment: Experiment, format: EvalFormat): string {
  switch (format) {
    case 'table':
      return `${experimentTable(experiment).join('\n')}\n`;
    case 'json':
      return `${JSON.stringify(experiment, null, 2)}\n`;
    case 'junit':
      return `${experimentJunit(experiment)}\n`;
    case 'markdown':
      return `${experimentMarkdown(experiment).join('\n')}\n`;
  }
}

const HEADER = ['CASE', 'STATUS', 'SCORE', 'FAILING', 'COST', 'DURATION'];

/** An experiment as a terminal reads it: what it ran, a row per case, and a totals line. */
export function experimentTable(experiment: Experiment): string[] {
  const rows = experiment.cases.map((c) => [
    c.caseId,
    c.status,
    caseMeanScore(c).toFixed(2),
    oneLine(failingOf(c), 60) || unscoredNote(c) || '-',
    formatCost(c.usage.costUsd),
    formatDuration(c.durationMs),
  ]);
  return [
    headline(experiment),
    ...alignColumns([HEADER, ...rows], { right: [2, 4, 5] }),
    totalsLine(experiment),
    ...budgetLines(experiment),
  ];
}

/** What a case failed: the scorers below their threshold, or its error. */
export function failingOf(result: CaseResult): string {
  if (result.status === 'error') return `error: ${result.error ?? 'unknown'}`;
  const failed = result.scores.filter((s) => !s.pass).map((s) => s.scorer);
  if (failed.length > 0) return failed.join(', ');
  if (result.status !== 'failed') return '';
  return `task ${result.taskStatus ?? 'failed'}${result.scores.length === 0 ? ` (${UNSCORED})` : ''}`;
}

const UNSCORED = "no scores: judged by its task's end";

/** What a case that passed with no scores says: its task's end decided it. */
const unscoredNote = (result: CaseResult): string =>
  result.status === 'passed' && result.scores.length === 0 ? UNSCORED : '';

/** `1 case`, `3 cases`. */
export const plural = (n: number, noun: string): string => `${n} ${noun}${n === 1 ? '' : 's'}`;

/**
 * The budget it ran within, if one was given: what the cases spent against it, and by how much they went over it
 * (the cases already started when it was reached spend on; no other case starts).
 */
export function budgetLines(e: Experiment): string[] {
  if (!e.budget) return [];
  const { usd, spentUsd } = e.budget;
  const over = spentUsd - usd;
  return [
    `budget ${formatCost(usd)}: spent ${formatCost(spentUsd)}${over > 0 ? `, over budget by ${formatCost(over)} (cases already started)` : ''}`,
  ];
}

function headline(e: Experiment): string {
  return `experiment ${e.id}: dataset ${e.dataset.name}@${e.dataset.version}, pipeline ${e.pipeline.name} (${e.pipeline.file}, ${shortHash(e.pipeline.hash)}), mode ${e.mode}, ${e.startedAt}`;
}

/** The experiment's totals in one line. */
export function totalsLine(e: Experiment): string {
  const t = e.totals;
  return (
    `${plural(t.cases, 'case')}: ${t.passed} passed, ${t.failed} failed, ${t.errored} errored, ${t.skipped} skipped` +
    ` · mean score ${t.meanScore.toFixed(2)} · cost ${formatCost(t.costUsd)} (judges ${formatCost(t.judgeCostUsd)})` +
    ` · p50 ${formatDuration(t.p50Ms)}, p90 ${formatDuration(t.p90Ms)} · took ${formatDuration(e.durationMs)}`
  );
}

export const shortHash = (hash: string): string => hash.slice(0, 12);

/**
 * An experiment as JUnit XML, for a CI system's test report: a testsuite, a testcase per case, a `<failure>` per
 * scorer that failed (its reason in the message), an `<error>` for a case that could not be run or scored.
 */
export function experimentJunit(e: Experiment): string {
  return [
    XML_DECLARATION,
    xmlElement(
      'testsuites',
      {
        name: 'troupe eval',
        tests: e.cases.length,
        failures: e.totals.failed,
        errors: e.totals.errored,
        time: junitSeconds(e.durationMs),
      },
      [experimentSuite(e, '  ')],
    ),
  ].join('\n');
}

/** The experiment's testsuite element. */
export function experimentSuite(e: Experiment, indent: string): string {
  const inner = `${indent}  `;
  const properties = xmlElement(
    'properties',
    {},
    Object.entries({
      dataset: `${e.dataset.name}@${e.dataset.version}`,
      pipeline: e.pipeline.name,
      'pipeline.file': e.pipeline.file,
      'pipeline.hash': e.pipeline.hash,
      mode: e.mode,
      meanScore: e.totals.meanScore.toFixed(4),
      costUsd: e.totals.costUsd.toFixed(6),
      judgeCostUsd: e.totals.judgeCostUsd.toFixed(6),
      skipped: String(e.totals.skipped),
      ...(e.budget ? { budgetUsd: e.budget.usd.toFixed(6), spentUsd: e.budget.spentUsd.toFixed(6) } : {}),
    }).map(([name, value]) => xmlElement('property', { name, value }, [], `${inner}  `)),
    inner,
  );
  return xmlElement(
    'testsuite',
    {
      name: e.id,
      tests: e.cases.length,
      failures: e.cases.filter((c) => c.status === 'failed').length,
      errors: e.cases.filter((c) => c.status === 'error').length,
      skipped: 0,
      time: junitSeconds(e.durationMs),
      timestamp: e.startedAt,
    },
    [properties, ...e.cases.map((c) => caseTestcase(e, c, inner))],
    indent,
  );
}

function caseTestcase(e: Experiment, c: CaseResult, indent: string): string {
  const inner = `${indent}  `;
  const children: string[] = [];
  if (c.status === 'error') {
    const message = c.error ?? 'the case could not be run';
    children.push(xmlText('error', { message: oneLine(message, 500), type: 'error' }, message, inner));
  }
  for (const score of c.scores.filter((s) => !s.pass)) {
    children.push(
      xmlText(
        'failure',
        { message: `${score.scorer}: ${oneLine(score.reason, 500)}`, type: score.type },
        scoreLine(score),
        inner,
      ),
    );
  }
  if (c.status === 'failed' && c.scores.every((s) => s.pass)) {
    const message = `the task ended ${c.taskStatus ?? 'failed'}${c.scores.length === 0 ? ` (${UNSCORED})` : ''}`;
    children.push(xmlText('failure', { message, type: 'task' }, message, inner));
  }
  const out = [c.taskId ? `task ${c.taskId}` : undefined, c.output].filter((x) => x !== undefined).join('\n');
  if (out !== '') children.push(xmlText('system-out', {}, out, inner));
  return xmlElement(
    'testcase',
    { name: c.caseId, classname: `${e.dataset.name}@${e.dataset.version}`, time: junitSeconds(c.durationMs) },
    children,
    indent,
  );
}

/** A score as a sentence: `exact: 0.00 (threshold 1.00): the output was "no"`. */
export const scoreLine = (s: Score): string =>
  `${s.scorer}: ${s.value.toFixed(2)} (threshold ${s.threshold.toFixed(2)})${s.costUsd ? `, judge cost ${formatCost(s.costUsd)}` : ''}: ${s.reason}`;

const STATUS_MARK: Readonly<Record<CaseResult['status'], string>> = {
  passed: '✅ passed',
  failed: '❌ failed',
  error: '⚠️ error',
};

/** An experiment in Markdown: a summary, a table of the cases and what each failing case failed. */
export function experimentMarkdown(e: Experiment): string[] {
  const t = e.totals;
  const rate = t.cases === 0 ? 0 : Math.round((t.passed / t.cases) * 100);
  const rows = e.cases.map((c) => [
    c.caseId,
    STATUS_MARK[c.status],
    caseMeanScore(c).toFixed(2),
    oneLine(failingOf(c) || unscoredNote(c), 80),
    formatCost(c.usage.costUsd),
    formatDuration(c.durationMs),
  ]);
  const failures = e.cases.filter((c) => c.status !== 'passed');
  return [
    `### Experiment \`${e.id}\``,
    '',
    `Dataset **${e.dataset.name}@${e.dataset.version}** · pipeline **${e.pipeline.name}** (\`${e.pipeline.file}\`, \`${shortHash(e.pipeline.hash)}\`) · mode ${e.mode} · ${e.startedAt}`,
    '',
    `**${t.passed} of ${t.cases} passed** (${rate}%) · ${t.failed} failed · ${t.errored} errored · ${t.skipped} skipped · mean score ${t.meanScore.toFixed(2)} · cost ${formatCost(t.costUsd)} (judges ${formatCost(t.judgeCostUsd)}) · p50 ${formatDuration(t.p50Ms)} · p90 ${formatDuration(t.p90Ms)}`,
    ...budgetLines(e).flatMap((line) => ['', line]),
    '',
    ...markdownTable(['Case', 'Status', 'Score', 'Failing', 'Cost', 'Duration'], rows, [2, 4, 5]),
    ...(failures.length === 0 ? [] : ['', '#### Failures', '', ...failures.flatMap(failureItems)]),
  ];
}

function failureItems(c: CaseResult): string[] {
  const id = `**${markdownCell(c.caseId)}**`;
  if (c.status === 'error') return [`- ${id} (error): ${markdownCell(oneLine(c.error ?? 'unknown', 300))}`];
  const failed = c.scores.filter((s) => !s.pass);
  if (failed.length === 0)
    return [
      `- ${id}: the task ended ${c.taskStatus ?? 'failed'}${c.scores.length === 0 ? ` (${UNSCORED})` : ''}`,
    ];
  return failed.map((s) => `- ${id}: ${markdownCell(oneLine(scoreLine(s), 300))}`);
}
