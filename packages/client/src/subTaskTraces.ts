import { MAX_PIPELINE_DEPTH } from '@troupe/protocol';
import type { JetStreamBus } from '@troupe/runtime/bus';
import { readTaskEvents } from './taskOperations.ts';
import { buildTaskTrace, type TaskTrace } from './taskTrace.ts';

/** Reads the trace of a sub-task, or undefined when none of its events are stored (yet, or any more). */
export type SubTaskReader = (taskId: string, pipeline: string) => Promise<TaskTrace | undefined>;

/**
 * The trace with the trace of each `pipeline` step's sub-task in its step, and theirs in theirs, so a trace shows
 * the whole tree of work a task did. A sub-task that cannot be read is left as its id and pipeline.
 */
export async function withSubTasks(
  trace: TaskTrace,
  read: SubTaskReader,
  depth = MAX_PIPELINE_DEPTH,
): Promise<TaskTrace> {
  if (depth <= 0 || !trace.steps.some((step) => step.subTask)) return trace;
  const steps = await Promise.all(
    trace.steps.map(async (step) => {
      const sub = step.subTask;
      if (!sub) return step;
      const found = await read(sub.taskId, sub.pipeline).catch(() => undefined);
      if (!found) return step;
      return { ...step, subTask: { ...sub, trace: await withSubTasks(found, read, depth - 1) } };
    }),
  );
  return { ...trace, steps };
}

/** A {@link SubTaskReader} over the `EVENTS` stream. */
export function subTaskReader(bus: JetStreamBus): SubTaskReader {
  return async (taskId, pipeline) => {
    const events = await readTaskEvents(bus, taskId, pipeline);
    return events.length === 0 ? undefined : buildTaskTrace(taskId, events);
  };
}
