import { shortVersion } from '@troupe/coordinator';
import {
  emptyUsage,
  endingOfRecord,
  sumUsage,
  type UsageTotals,
  type WorkflowRecord,
} from '@troupe/protocol';
import { describeEnding } from '@troupe/runtime';
import { shownStatus, taskDuration } from '../workflowRecords.ts';
import { cacheTokens } from './cacheTokens.ts';
import { formatDuration } from './duration.ts';

/**
 * Tokens and cost as `troupe trace` writes them, so one task reads the same in both: in→out with the prompt cache's
 * reads and writes, and the cost to four places even when it is nothing (`$0.0000`: a model with no price, or a
 * scripted one).
 */
export const formatTokens = (usage: UsageTotals): string =>
  `${usage.inputTokens}→${usage.outputTokens}${cacheTokens(usage)}`;
export const formatCost = (usd: number): string => `$${usd.toFixed(4)}`;

export const RUNS_HEADER = [
  'PIPELINE',
  'VERSION',
  'TASK',
  'STATE',
  'ROUNDS',
  'DURATION',
  'TOKENS',
  'COST',
  'AGE',
];
/** ROUNDS, TOKENS and COST are numbers: aligned right. */
export const RUNS_NUMERIC = [4, 6, 7];

/** One task of `troupe runs`. */
export function runRow(r: WorkflowRecord, now: number): string[] {
  const ending = endingOfRecord(r);
  const duration = taskDuration(r, now);
  return [
    r.pipeline,
    // The pipeline version the task runs on; `-` for a task from before versions were kept.
    r.version === undefined ? '-' : shortVersion(r.version),
    r.taskId,
    ending ? describeEnding(ending) : shownStatus(r),
    String(r.round),
    duration.finished ? formatDuration(duration.ms) : `${formatDuration(duration.ms)} so far`,
    formatTokens(r.usage),
    formatCost(r.usage.costUsd),
    `${formatDuration(now - Date.parse(r.createdAt))} ago`,
  ];
}

/** What `troupe runs --totals` groups by: a pipeline, or the day (UTC) a task was accepted. */
export const TOTALS_BY = ['pipeline', 'day'] as const;
export type TotalsBy = (typeof TOTALS_BY)[number];

/** The tasks of one pipeline or one day, and what they spent together. */
export interface RunTotal {
  pipeline?: string;
  day?: string;
  tasks: number;
  usage: UsageTotals;
}

/** The records' usage summed per pipeline (by name) or per day (newest first). */
export function runTotals(records: readonly WorkflowRecord[], by: TotalsBy): RunTotal[] {
  const groups = new Map<string, RunTotal>();
  for (const r of records) {
    const key = by === 'pipeline' ? r.pipeline : r.createdAt.slice(0, 10);
    const total = groups.get(key) ?? { [by]: key, tasks: 0, usage: emptyUsage() };
    total.tasks += 1;
    total.usage = sumUsage(total.usage, r.usage);
    groups.set(key, total);
  }
  const keys = [...groups.keys()].sort();
  if (by === 'day') keys.reverse();
  return keys.map((key) => groups.get(key) as RunTotal);
}

/** The totals as a table, with a last line summing them all when there is more than one. */
export function totalsRows(totals: readonly RunTotal[], by: TotalsBy): string[][] {
  const line = (name: string, tasks: number, usage: UsageTotals) => [
    name,
    String(tasks),
    String(usage.modelCalls),
    formatTokens(usage),
    formatCost(usage.costUsd),
  ];
  const rows = totals.map((t) => line((by === 'pipeline' ? t.pipeline : t.day) ?? '', t.tasks, t.usage));
  if (totals.length > 1) {
    const all = totals.reduce((sum, t) => sumUsage(sum, t.usage), emptyUsage());
    rows.push(
      line(
        'total',
        totals.reduce((n, t) => n + t.tasks, 0),
        all,
      ),
    );
  }
  return [[by.toUpperCase(), 'TASKS', 'CALLS', 'TOKENS', 'COST'], ...rows];
}
