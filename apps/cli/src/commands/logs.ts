import type { TroupeEvent } from '@troupe/protocol';
import { exitWhenStdoutCloses } from '../closedPipe.ts';
import { openEventFeed } from '../eventFeed.ts';
import { formatEvent } from '../format/formatEvent.ts';
import { CliError, checkTaskId, connectCli, type ServerOptions } from '../server.ts';
import { exitCodeOf, untilEnded } from '../taskEnding.ts';
import { finalTracker } from '../watch.ts';
import { workflowsIfAny } from '../workflowRecords.ts';

export interface LogsOptions extends ServerOptions {
  json: boolean;
  follow: boolean;
}

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
