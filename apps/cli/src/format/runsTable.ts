import { shortVersion } from '@troupe/coordinator';
import {
  emptyUsage,
  endingOfRecord,
  sumUsage,
  type UsageTotals,
  type WorkflowRecord,
} from '@troupe/protocol';
import { describeEnding } from '@troupe/runtime';
import { taskDuration } from '../workflowRecords.ts';
import { formatDuration } from './duration.ts';

/**
 * Tokens and cost as `troupe trace` writes them, so one task reads the same in both: in→out with the cached ones,
 * and the cost to four places even when it is nothing (`$0.0000`: a model with no price, or a scripted one).
 */
export const formatTokens = (usage: UsageTotals): string =>
  `${usage.inputTokens}→${usage.outputTokens}${usage.cachedTokens > 0 ? ` (${usage.cachedTokens} cached)` : ''}`;
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
    ending ? describeEnding(ending) : r.status,
    String(r.round),
    duration.finished ? formatDuration(duration.ms) : `${formatDuration(duration.ms)} so far`,
    formatTokens(r.usage),
    formatCost(r.usage.costUsd),
    `${formatDuration(now - Date.parse(r.createdAt))} ago`,
  ];
}
