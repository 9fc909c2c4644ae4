import { buildTaskTrace, subTaskReader, wholeTrace, withSubTasks } from '@troupe/client';
import { ValueStore } from '@troupe/runtime';
import { exitWhenStdoutCloses } from '../closedPipe.ts';
import { taskHistory } from '../eventFeed.ts';
import { formatTrace } from '../format/formatTrace.ts';
import { CliError, checkTaskId, connectCli, type ServerOptions } from '../server.ts';
import { workflowsIfAny } from '../workflowRecords.ts';

export interface TraceOptions extends ServerOptions {
  json: boolean;
}

/**
 * `troupe trace`: a task as a tree — its steps in the flow's shape (route choices, parallel branches and their join,
 * foreach items, sub-pipeline tasks nested), and in each the agent's model calls, tool calls and the people it
 * asked — with totals, from the `EVENTS` stream (so for a finished task, or for one still running as far as it
 * got). `--json` prints the same tree as one JSON document, with outputs too large for an event read back whole.
 */
export async function trace(taskId: string, options: TraceOptions): Promise<number> {
  checkTaskId(taskId);
  exitWhenStdoutCloses();
  const bus = await connectCli(options, 'troupe-trace');
  try {
    const store = await workflowsIfAny(bus);
    const record = (await store?.get(taskId))?.value;
    const events = await taskHistory(bus, taskId, record?.pipeline);
    if (events.length === 0 && record === undefined)
      throw new CliError(`no task ${taskId} is known on this server`);
    // The record keeps the final event, stored before it is published: use it if the stream missed it.
    const final = record?.final;
    if (final && !events.some((e) => e.id === final.id)) events.push(final);
    const built = buildTaskTrace(taskId, events);
    if (built.pipeline === '' && record) built.pipeline = record.pipeline;
    if (record?.version !== undefined) built.version = record.version;
    // A pipeline step's sub-task is part of the work: its trace goes in its step.
    const tree = await withSubTasks(built, subTaskReader(bus));
    // The JSON tree is the whole record: outputs kept in the object store are read back into it.
    const values = new ValueStore(bus);
    process.stdout.write(
      options.json
        ? `${JSON.stringify(await wholeTrace(tree, (ref) => values.read(ref)))}\n`
        : `${formatTrace(tree, { color: process.stdout.isTTY === true })}\n`,
    );
    return 0;
  } finally {
    await bus.close();
  }
}
