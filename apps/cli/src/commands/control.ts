import { WorkflowRecord } from '@troupe/coordinator';
import { BUCKETS, ControlReceipt, ControlRefusal, subjects } from '@troupe/protocol';
import { KvStore, type NatsBus, TransportError } from '@troupe/runtime';
import { CLI_WAIT, CliError, connectCli, type ServerOptions } from '../server.ts';

export interface CancelOptions extends ServerOptions {
  reason?: string;
}

/** `troupe cancel`: asks the coordinator running a task to stop it; its model call in flight is aborted. */
export async function cancel(taskId: string, options: CancelOptions): Promise<number> {
  const bus = await connectCli(options, 'troupe-cancel');
  try {
    const record = (await (await workflows(bus)).get(taskId))?.value;
    if (!record) throw new CliError(`no task ${taskId} is known on this server`);
    if (record.status !== 'running')
      throw new CliError(`task ${taskId} already ${record.status}; nothing to cancel`);
    try {
      await bus.request(
        subjects.control(taskId),
        { action: 'cancel', ...(options.reason ? { reason: options.reason } : {}) },
        ControlReceipt,
        { timeoutMs: 10_000, meta: { taskId, from: 'user', kind: 'cancel' } },
      );
    } catch (error) {
      // A coordinator answers with the task's state when none runs it (unknown_task, task_ended, not_running).
      if (error instanceof TransportError && ControlRefusal.safeParse(error.code).success) {
        throw new CliError(error.message);
      }
      if (error instanceof TransportError && (error.code === 'no_responders' || error.code === 'timeout')) {
        throw new CliError(
          `no coordinator answered for task ${taskId} (it is at ${record.state}); none is running on this server — start one with troupe up`,
        );
      }
      throw error;
    }
    process.stdout.write(`${taskId}: cancelled\n`);
    return 0;
  } finally {
    await bus.close();
  }
}

export interface StatusOptions extends ServerOptions {
  all: boolean;
  json: boolean;
}

/** `troupe status`: tasks from KV `workflows` — running ones by default — with state, round, usage and age. */
export async function status(taskId: string | undefined, options: StatusOptions): Promise<number> {
  const bus = await connectCli(options, 'troupe-status');
  try {
    const store = await workflows(bus);
    const keys = taskId ? [taskId] : await store.keys();
    const records: WorkflowRecord[] = [];
    for (const key of keys) {
      const entry = await store.get(key);
      if (entry && (taskId || options.all || entry.value.status === 'running')) records.push(entry.value);
    }
    if (taskId && records.length === 0) throw new CliError(`no task ${taskId} is known on this server`);
    records.sort((a, b) => a.createdAt.localeCompare(b.createdAt));
    for (const r of records) {
      if (options.json) {
        const { snapshot: _snapshot, ...summary } = r;
        process.stdout.write(`${JSON.stringify(summary)}\n`);
      } else {
        process.stdout.write(`${line(r)}\n`);
      }
    }
    if (records.length === 0 && !options.json)
      process.stdout.write(options.all ? 'no tasks\n' : 'no task is running\n');
    return 0;
  } finally {
    await bus.close();
  }
}

function line(r: WorkflowRecord): string {
  const age = Math.max(0, Math.round((Date.now() - Date.parse(r.createdAt)) / 1000));
  const cost = r.usage.costUsd > 0 ? ` $${r.usage.costUsd.toFixed(4)}` : '';
  const tokens = `${r.usage.inputTokens}→${r.usage.outputTokens} tok${cost}`;
  return `${r.taskId}  ${r.pipeline}  ${r.status.padEnd(9)}  step ${r.state} (round ${r.round})  ${tokens}  ${age} s  ${r.goal.slice(0, 60)}`;
}

async function workflows(bus: NatsBus) {
  try {
    return await KvStore.open(bus, BUCKETS.workflows, WorkflowRecord, CLI_WAIT);
  } catch (error) {
    throw new CliError(`no Troupe coordinator has run on this server yet (${(error as Error).message})`);
  }
}
