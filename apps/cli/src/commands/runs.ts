import { suggestion } from '@troupe/coordinator';
import type { WorkflowRecord } from '@troupe/protocol';
import { exitWhenStdoutCloses } from '../closedPipe.ts';
import {
  RUNS_HEADER,
  RUNS_NUMERIC,
  runRow,
  runTotals,
  TOTALS_BY,
  type TotalsBy,
  totalsRows,
} from '../format/runsTable.ts';
import { alignColumns } from '../format/table.ts';
import { CliError, connectCli, type ServerOptions } from '../server.ts';
import { openWorkflows, readValues, shownStatus } from '../workflowRecords.ts';

export interface RunsOptions extends ServerOptions {
  pipeline?: string;
  state?: string;
  limit: number;
  json: boolean;
  /** Sum tokens and cost per pipeline or per day instead of listing tasks. */
  totals?: string;
  /** Only this task's family: the task it was restarted or forked from (and so on up), and every task made from those. */
  family?: string;
}

/** A record's status, or `paused`: the running tasks a person holds (`running` lists them too). */
type RunState = WorkflowRecord['status'] | 'paused';
const STATES: readonly RunState[] = ['running', 'paused', 'completed', 'failed', 'cancelled'];

/** `troupe runs`: the tasks KV `workflows` remembers, newest first, with how each went and what it cost. */
export async function runs(options: RunsOptions): Promise<number> {
  const state = options.state === undefined ? undefined : stateNamed(options.state);
  const totals = options.totals === undefined ? undefined : totalsNamed(options.totals);
  exitWhenStdoutCloses();
  const bus = await connectCli(options, 'troupe-runs');
  try {
    const all = await readValues(await openWorkflows(bus));
    const records = options.family === undefined ? all : familyOf(all, options.family);
    const matching = records
      .filter(
        (r) =>
          (options.pipeline === undefined || r.pipeline === options.pipeline) &&
          (!state || r.status === state || (state === 'paused' && shownStatus(r) === 'paused')),
      )
      .sort((a, b) => b.createdAt.localeCompare(a.createdAt));
    if (totals) {
      printTotals(matching, totals, options.json, () => nothingToShow(records, options.pipeline, state));
      return 0;
    }
    const shown = matching.slice(0, options.limit);
    if (options.json) {
      for (const { snapshot: _snapshot, ...summary } of shown)
        process.stdout.write(`${JSON.stringify(summary)}\n`);
    } else if (shown.length === 0) {
      process.stdout.write(`${nothingToShow(records, options.pipeline, state)}\n`);
    } else {
      const now = Date.now();
      // A restart's or fork's origin in a column of its own, shown when a task listed has one.
      const origins = shown.some((r) => r.origin !== undefined);
      const rows = [
        origins ? [...RUNS_HEADER, 'ORIGIN'] : RUNS_HEADER,
        ...shown.map((r) => (origins ? [...runRow(r, now), originOf(r)] : runRow(r, now))),
      ];
      for (const line of alignColumns(rows, { right: RUNS_NUMERIC })) {
        process.stdout.write(`${line}\n`);
      }
    }
    if (matching.length > shown.length) {
      process.stderr.write(
        `showing the ${shown.length} newest of ${matching.length} tasks; --limit shows more\n`,
      );
    }
    return 0;
  } finally {
    await bus.close();
  }
}

/** Where a restart or fork came from, as `troupe runs` shows it: `restart of <task> from <step>`, `fork of … at …`. */
export function originOf({ origin }: WorkflowRecord): string {
  if (origin === undefined) return '-';
  const edited = origin.edited?.length ? ` (edited ${origin.edited.join(', ')})` : '';
  return origin.kind === 'restart'
    ? `restart of ${origin.taskId} from ${origin.step}`
    : `fork of ${origin.taskId} at ${origin.step}${edited}`;
}

/**
 * A task's family among the records: the tasks it comes from by restarts and forks, up to the first, and every task
 * made from that one, however deep. Throws when no record is the task's.
 */
function familyOf(records: WorkflowRecord[], taskId: string): WorkflowRecord[] {
  const byId = new Map(records.map((r) => [r.taskId, r]));
  if (!byId.has(taskId)) throw new CliError(`--family: no task ${taskId} is known on this server`, 1);
  let root = taskId;
  const seen = new Set<string>();
  while (!seen.has(root)) {
    seen.add(root);
    const up = byId.get(root)?.origin?.taskId;
    if (up === undefined || !byId.has(up)) break;
    root = up;
  }
  const family = new Set([root]);
  // Made from a member, a task joins the family; passes until one adds nobody (a family is small).
  for (let grew = true; grew; ) {
    grew = false;
    for (const r of records) {
      if (r.origin && family.has(r.origin.taskId) && !family.has(r.taskId)) {
        family.add(r.taskId);
        grew = true;
      }
    }
  }
  return records.filter((r) => family.has(r.taskId));
}

/** Every matching task counts in the totals, --limit or not: a total of the newest fifty would mislead. */
function printTotals(records: WorkflowRecord[], by: TotalsBy, json: boolean, nothing: () => string) {
  const totals = runTotals(records, by);
  if (json) {
    for (const total of totals) process.stdout.write(`${JSON.stringify(total)}\n`);
  } else if (totals.length === 0) {
    process.stdout.write(`${nothing()}\n`);
  } else {
    for (const line of alignColumns(totalsRows(totals, by), { right: [1, 2, 3, 4] }))
      process.stdout.write(`${line}\n`);
  }
}

function totalsNamed(value: string): TotalsBy {
  const by = TOTALS_BY.find((b) => b === value.trim().toLowerCase());
  if (by) return by;
  throw new CliError(
    `--totals: cannot total by "${value}"${suggestion(value, TOTALS_BY)}; by: ${TOTALS_BY.join(' or ')}`,
    2,
  );
}

function stateNamed(value: string): RunState {
  const state = STATES.find((s) => s === value.trim().toLowerCase());
  if (state) return state;
  throw new CliError(
    `--state: no state "${value}"${suggestion(value, STATES)}; states: ${STATES.join(', ')}`,
    2,
  );
}

/** Why the list is empty, with the pipeline meant when one was misspelled. */
function nothingToShow(
  records: WorkflowRecord[],
  pipeline: string | undefined,
  state: RunState | undefined,
): string {
  if (records.length === 0) return 'no tasks';
  const pipelines = [...new Set(records.map((r) => r.pipeline))].sort();
  if (pipeline !== undefined && !pipelines.includes(pipeline)) {
    return `no tasks of pipeline ${pipeline}${suggestion(pipeline, pipelines)}; tasks are of: ${pipelines.join(', ')}`;
  }
  return `no ${state === undefined ? '' : `${state} `}tasks${pipeline === undefined ? '' : ` of pipeline ${pipeline}`}`;
}
