import type { TroupeEvent } from '@troupe/protocol';
import { type JetStreamBus, listWorkspaceFiles, ValueStore } from '@troupe/runtime';
import { elsewhereHint, workspaceHere, workspacesRoot } from './taskWorkspaces.ts';

/** What a task that ended left for the person who waited: its output, whole, and where its files are. */
export interface TaskResult {
  taskId: string;
  pipeline: string;
  status: 'completed' | 'failed' | 'cancelled';
  /** A completed task's final output, whole (read back from the object store when the event held a preview). */
  output?: string;
  /** Set when `output` is only the event's preview: the whole could not be read back (which it says). */
  outputPreview?: true;
  /** Why a failed task failed. */
  failure?: { reason: string; message: string };
  /** The task's workspace on this host, or that it is not here. */
  files: { here: true; workspace: string; count: number } | { here: false; hint: string };
}

/**
 * The result of the task whose final event this is; the files are looked for under the home's workspaces (or
 * `workspaces`). Without a bus (`troupe run`, which stores no values) an output moved to the value store is the preview.
 */
export async function taskResultOf(
  bus: JetStreamBus | undefined,
  final: TroupeEvent,
  where: { home?: string; workspaces?: string },
): Promise<TaskResult> {
  const base = { taskId: final.taskId, pipeline: final.pipeline };
  const files = await filesOf(final.pipeline, final.taskId, where);
  if (final.kind === 'task.completed') {
    const ref = final.data.outputRef;
    if (!ref) return { ...base, status: 'completed', output: final.data.output, files };
    // A user who may not read the pipeline's values still gets the preview, which says where the whole is.
    const whole = bus && (await new ValueStore(bus).read(ref).catch(() => undefined));
    return whole === undefined
      ? { ...base, status: 'completed', output: final.data.output, outputPreview: true, files }
      : { ...base, status: 'completed', output: whole, files };
  }
  if (final.kind === 'task.failed') {
    return {
      ...base,
      status: 'failed',
      failure: { reason: final.data.reason, message: final.data.message },
      files,
    };
  }
  return { ...base, status: 'cancelled', files };
}

async function filesOf(
  pipeline: string,
  taskId: string,
  where: { home?: string; workspaces?: string },
): Promise<TaskResult['files']> {
  const dir = await workspaceHere(workspacesRoot(where), pipeline, taskId);
  if (!dir) return { here: false, hint: elsewhereHint(taskId, pipeline) };
  const listing = await listWorkspaceFiles(dir).catch(() => undefined);
  return { here: true, workspace: dir, count: listing?.files.length ?? 0 };
}

/**
 * The result as a person reads it after the task's events: the output as it is (a JSON output indented), then where
 * the files are and the command that lists them.
 */
export function formatTaskResult(result: TaskResult): string {
  const lines: string[] = [''];
  if (result.output !== undefined) {
    lines.push(
      `output of ${result.taskId}${result.outputPreview ? ' (a preview: the whole could not be read back)' : ''}:`,
    );
    lines.push(readable(result.output), '');
  }
  if (result.files.here) {
    const count = `${result.files.count} file${result.files.count === 1 ? '' : 's'}`;
    lines.push(
      `files of ${result.taskId}: ${count} in ${result.files.workspace}`,
      `  list them: troupe files ${result.taskId}   print one: troupe files ${result.taskId} <path>`,
    );
  } else {
    lines.push(`files of ${result.taskId}: not on this host; ${result.files.hint}`);
  }
  return `${lines.join('\n')}\n`;
}

/** JSON text indented, anything else as it is. */
function readable(output: string): string {
  const trimmed = output.trim();
  if (!trimmed.startsWith('{') && !trimmed.startsWith('[')) return output.replace(/\n$/, '');
  try {
    return JSON.stringify(JSON.parse(trimmed), null, 2);
  } catch {
    return output.replace(/\n$/, '');
  }
}
