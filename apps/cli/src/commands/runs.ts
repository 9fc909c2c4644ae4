import { suggestion } from '@troupe/coordinator';
import type { WorkflowRecord } from '@troupe/protocol';
import { exitWhenStdoutCloses } from '../closedPipe.ts';
import { RUNS_HEADER, RUNS_NUMERIC, runRow } from '../format/runsTable.ts';
import { alignColumns } from '../format/table.ts';
import { CliError, connectCli, type ServerOptions } from '../server.ts';
import { openWorkflows, readValues } from '../workflowRecords.ts';

export interface RunsOptions extends ServerOptions {
  pipeline?: string;
  state?: string;
  limit: number;
  json: boolean;
}

const STATES: readonly WorkflowRecord['status'][] = ['running', 'completed', 'failed', 'cancelled'];

/** `troupe runs`: the tasks KV `workflows` remembers, newest first, with how each went and what it cost. */
export async function runs(options: RunsOptions): Promise<number> {
  const state = options.state === undefined ? undefined : stateNamed(options.state);
  exitWhenStdoutCloses();
  const bus = await connectCli(options, 'troupe-runs');
  try {
    const records = await readValues(await openWorkflows(bus));
    const matching = records
      .filter(
        (r) =>
          (options.pipeline === undefined || r.pipeline === options.pipeline) &&
          (!state || r.status === state),
      )
      .sort((a, b) => b.createdAt.localeCompare(a.createdAt));
    const shown = matching.slice(0, options.limit);
    if (options.json) {
      for (const { snapshot: _snapshot, ...summary } of shown)
        process.stdout.write(`${JSON.stringify(summary)}\n`);
    } else if (shown.length === 0) {
      process.stdout.write(`${nothingToShow(records, options.pipeline, state)}\n`);
    } else {
      const now = Date.now();
      for (const line of alignColumns([RUNS_HEADER, ...shown.map((r) => runRow(r, now))], {
        right: RUNS_NUMERIC,
      })) {
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

function stateNamed(value: string): WorkflowRecord['status'] {
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
  state: WorkflowRecord['status'] | undefined,
): string {
  if (records.length === 0) return 'no tasks';
  const pipelines = [...new Set(records.map((r) => r.pipeline))].sort();
  if (pipeline !== undefined && !pipelines.includes(pipeline)) {
    return `no tasks of pipeline ${pipeline}${suggestion(pipeline, pipelines)}; tasks are of: ${pipelines.join(', ')}`;
  }
  return `no ${state === undefined ? '' : `${state} `}tasks${pipeline === undefined ? '' : ` of pipeline ${pipeline}`}`;
}
