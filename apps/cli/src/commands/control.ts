import { cancelTask, listHumanRequests, migrateTask, OperationError } from '@troupe/client';
import { shortVersion } from '@troupe/coordinator';
import { errorMessage, type HumanRequest, type WorkflowRecord } from '@troupe/protocol';
import type { JetStreamBus } from '@troupe/runtime';
import { tokenCounts } from '../format/cacheTokens.ts';
import { formatDuration } from '../format/duration.ts';
import { describeActivity } from '../format/taskActivity.ts';
import { CliError, connectCli, explain, type ServerOptions } from '../server.ts';
import { openWorkflows, readValues, shownStatus, taskDuration } from '../workflowRecords.ts';

export interface CancelOptions extends ServerOptions {
  reason?: string;
}

/** `troupe cancel`: asks the coordinator running a task to stop it; its model call in flight is aborted. */
export async function cancel(taskId: string, options: CancelOptions): Promise<number> {
  const bus = await connectCli(options, 'troupe-cancel');
  try {
    await cancelTask(bus, taskId, options.reason).catch((error) => {
      if (OperationError.is(error, 'no_coordinator'))
        throw new CliError(`${error.message} — start one with troupe up`);
      return explain(error);
    });
    process.stdout.write(`${taskId}: cancelled\n`);
    return 0;
  } finally {
    await bus.close();
  }
}

export interface MigrateOptions extends ServerOptions {
  to?: string;
  latest: boolean;
}

/**
 * `troupe migrate`: asks the coordinator running a task to move it to another version of its pipeline; it does so
 * only where the task's state fits that version, and otherwise says why, changing nothing.
 */
export async function migrate(taskId: string, options: MigrateOptions): Promise<number> {
  if ((options.to === undefined) === !options.latest) {
    throw new CliError('say which version: --to <hash> (a prefix will do) or --latest', 2);
  }
  const to = options.to?.trim().toLowerCase();
  if (to !== undefined && !/^[0-9a-f]{4,64}$/.test(to)) {
    throw new CliError(
      `--to: "${options.to}" is not a version hash, nor a prefix of one of at least 4 hex digits`,
      2,
    );
  }
  const bus = await connectCli(options, 'troupe-migrate');
  try {
    const moved = await migrateTask(bus, taskId, to).catch((error) => {
      if (OperationError.is(error, 'no_coordinator'))
        throw new CliError(`${error.message} — start one with troupe up`);
      return explain(error);
    });
    process.stdout.write(
      `${taskId}: moved from version ${shortVersion(moved.from)} to ${shortVersion(moved.to)}; it resumes there\n`,
    );
    return 0;
  } finally {
    await bus.close();
  }
}

export interface StatusOptions extends ServerOptions {
  all: boolean;
  json: boolean;
  /** Only these pipelines' tasks, when no task is named (a user whose NATS permissions cover only those). */
  pipelines?: string[];
}

/**
 * `troupe status`: tasks from KV `workflows` — running ones by default — with state, round and usage; how long a
 * running one has been going (and why it is not moving, when its record or a pending request says so), how long
 * a finished one took.
 */
export async function status(taskId: string | undefined, options: StatusOptions): Promise<number> {
  const bus = await connectCli(options, 'troupe-status');
  try {
    const store = await openWorkflows(bus);
    const records = (await readValues(store, taskId ? [taskId] : undefined)).filter(
      (r) =>
        taskId !== undefined ||
        ((options.all || r.status === 'running') &&
          (!options.pipelines || options.pipelines.includes(r.pipeline))),
    );
    if (taskId && records.length === 0) throw new CliError(`no task ${taskId} is known on this server`);
    records.sort((a, b) => a.createdAt.localeCompare(b.createdAt));
    if (options.json) {
      for (const { snapshot: _snapshot, ...summary } of records) {
        process.stdout.write(`${JSON.stringify(summary)}\n`);
      }
      return 0;
    }
    if (records.length === 0) {
      process.stdout.write(options.all ? 'no tasks\n' : 'no task is running\n');
      return 0;
    }
    const running = records.filter((r) => r.status === 'running').map((r) => r.pipeline);
    const pending = running.length > 0 ? await pendingRequests(bus, [...new Set(running)]) : [];
    const now = Date.now();
    for (const r of records) {
      process.stdout.write(`${statusLine(r, now)}\n`);
      for (const why of describeActivity(r, pending, now)) process.stdout.write(`  ${why}\n`);
    }
    return 0;
  } finally {
    await bus.close();
  }
}

/** One task in `troupe status`: its pipeline and version, state, tokens (prompt cache reads and writes apart), cost and time. */
export function statusLine(r: WorkflowRecord, now: number): string {
  const cost = r.usage.costUsd > 0 ? ` $${r.usage.costUsd.toFixed(4)}` : '';
  const tokens = `${tokenCounts(r.usage)}${cost}`;
  const duration = taskDuration(r, now);
  const time = duration.finished ? `took ${formatDuration(duration.ms)}` : formatDuration(duration.ms);
  // The pipeline as `name@version` (the version's short hash), as the task runs on it.
  const pipeline = r.version === undefined ? r.pipeline : `${r.pipeline}@${shortVersion(r.version)}`;
  return `${r.taskId}  ${pipeline}  ${shownStatus(r).padEnd(9)}  step ${r.state} (round ${r.round})  ${tokens}  ${time}  ${r.goal.slice(0, 60)}`;
}

/**
 * Approvals and questions of these pipelines waiting for a person; none when no coordinator has made the bucket.
 * Those of a pipeline whose requests this NATS user may not read are left out, which is said once.
 */
async function pendingRequests(bus: JetStreamBus, pipelines: string[]): Promise<HumanRequest[]> {
  const unread: string[] = [];
  const found = await Promise.all(
    pipelines.map((pipeline) =>
      listHumanRequests(bus, { pipelines: [pipeline] }).catch((error: unknown) => {
        if (!OperationError.is(error, 'no_coordinator')) unread.push(`${pipeline} (${errorMessage(error)})`);
        return [];
      }),
    ),
  );
  if (unread.length > 0) {
    process.stderr.write(
      `warning: cannot read what tasks of ${unread.join(', ')} wait on people for; shown without it\n`,
    );
  }
  return found.flat();
}
