import type { WorkflowRecord } from '@troupe/coordinator';
import type { TroupeEvent } from '@troupe/protocol';
import { exitWhenStdoutCloses } from '../closedPipe.ts';
import { type EventFeed, openEventFeed } from '../eventFeed.ts';
import { formatEvent } from '../format/formatEvent.ts';
import { CliError, checkTaskId, connectCli, type ServerOptions } from '../server.ts';
import { type FinalTracker, finalTracker } from '../watch.ts';
import { type WorkflowStore, workflowsIfAny } from '../workflowRecords.ts';

export interface LogsOptions extends ServerOptions {
  json: boolean;
  follow: boolean;
}

/**
 * How long a follower that reads in the task's record that it has ended waits for the final event to arrive
 * live (the record is written just before the event is published) before it reads the stream again.
 */
const FINAL_EVENT_GRACE_MS = 3_000;

/**
 * `troupe logs`: a task's whole flow from the `EVENTS` stream, in the format of `tail`; with `--follow`, then
 * its live events until it ends, the exit code saying how (0 completed, 1 failed or cancelled).
 */
export async function logs(taskId: string, options: LogsOptions): Promise<number> {
  checkTaskId(taskId);
  exitWhenStdoutCloses();
  const bus = await connectCli(options, 'troupe-logs');
  try {
    const store = await workflowsIfAny(bus);
    const record = (await store?.get(taskId))?.value;
    const ended = record !== undefined && record.status !== 'running';
    const color = process.stdout.isTTY && !options.json;
    let printed = 0;
    const final = finalTracker();
    const print = (event: TroupeEvent) => {
      printed += 1;
      process.stdout.write(`${options.json ? JSON.stringify(event) : formatEvent(event, { color })}\n`);
      final.note(event);
    };
    const feed = await openEventFeed(bus, {
      taskId,
      ...(record === undefined ? {} : { pipeline: record.pipeline }),
      history: {},
      live: options.follow && !ended,
      invalid: false,
      onEvent: print,
    });
    try {
      if (printed === 0 && record === undefined)
        throw new CliError(`no task ${taskId} is known on this server`);
      // The record keeps the final event, stored before it is published: show it if the stream missed it.
      if (final.current === undefined && ended && record.final) print(record.final);
      if (!options.follow) {
        if (final.current === undefined && !ended) {
          process.stderr.write(
            `task ${taskId} is still running${record ? ` (at ${record.state}, round ${record.round})` : ''}; \`troupe logs --follow ${taskId}\` follows it to its end\n`,
          );
        }
        return 0;
      }
      if (final.current) return exitCodeOf(final.current.kind);
      if (ended) return exitCodeOf(record.status);
      process.stderr.write(`following ${taskId} until it finishes\n`);
      return await untilEnded({ taskId, store, feed, final, print });
    } finally {
      feed.stop();
    }
  } finally {
    await bus.close();
  }
}

/**
 * Waits for the task's final event. The record in KV says it too, and first: should the live subscription have
 * missed the event (a reconnect), the stream is read again, and as a last resort the record's copy is shown.
 */
async function untilEnded(follow: {
  taskId: string;
  store: WorkflowStore | undefined;
  feed: EventFeed;
  final: FinalTracker;
  print(event: TroupeEvent): void;
}): Promise<number> {
  let onRecordEnded: (record: WorkflowRecord) => void = () => {};
  const recordEnded = new Promise<WorkflowRecord>((resolve) => (onRecordEnded = resolve));
  const unwatch = await follow.store?.watch(follow.taskId, (entry) => {
    if (entry.value.status !== 'running') onRecordEnded(entry.value);
  });
  try {
    const first = await Promise.race([follow.final.arrived, recordEnded]);
    if ('kind' in first) return exitCodeOf(first.kind);
    const late = await within(follow.final.arrived, FINAL_EVENT_GRACE_MS);
    if (late) return exitCodeOf(late.kind);
    await follow.feed.catchUp();
    const caught = follow.final.current;
    if (caught) return exitCodeOf(caught.kind);
    if (first.final) follow.print(first.final);
    return exitCodeOf(first.status);
  } finally {
    unwatch?.();
  }
}

const exitCodeOf = (ending: string): number =>
  ending === 'task.completed' || ending === 'completed' ? 0 : 1;

/** What `work` resolves with within `ms`, else undefined; the timer does not outlive the wait. */
async function within<T>(work: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
  });
  try {
    return await Promise.race([work, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
