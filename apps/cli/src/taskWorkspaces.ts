import { readdir, stat } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { taskWorkspace } from '@troupe/runtime';
import { resolveHome } from './home.ts';

/**
 * Where this host keeps task workspaces: `--workspaces`, else `<home>/workspaces`, as `troupe up` and `troupe worker`
 * on that home lay them out (`<pipeline>/<taskId>` under it).
 */
export function workspacesRoot(options: { home?: string; workspaces?: string }): string {
  return options.workspaces !== undefined && options.workspaces !== ''
    ? resolve(options.workspaces)
    : join(resolveHome(options.home), 'workspaces');
}

/** The task's workspace under `root` when this host holds it, else undefined. */
export async function workspaceHere(
  root: string,
  pipeline: string,
  taskId: string,
): Promise<string | undefined> {
  const dir = taskWorkspace(root, pipeline, taskId);
  return (await isDirectory(dir)) ? dir : undefined;
}

/** Every workspace of the task under `root`, by pipeline: found without asking NATS, for a task whose record is gone. */
export async function workspacesOfTask(
  root: string,
  taskId: string,
): Promise<{ pipeline: string; dir: string }[]> {
  const pipelines = await readdir(root, { withFileTypes: true }).catch(() => []);
  const found: { pipeline: string; dir: string }[] = [];
  for (const entry of pipelines) {
    if (!entry.isDirectory()) continue;
    const dir = await workspaceHere(root, entry.name, taskId);
    if (dir) found.push({ pipeline: entry.name, dir });
  }
  return found;
}

/** What to tell a person whose task's workspace is not on this host: where it is kept and how to get at it. */
export function elsewhereHint(taskId: string, pipeline: string): string {
  return (
    `its workspace is kept on the host whose troupe up or troupe worker ran its steps, as <home>/workspaces/${pipeline}/${taskId} there: ` +
    `run troupe files ${taskId} on that host, or serve it over HTTP from there with troupe gateway (--workspaces <dir>). ` +
    'A task that has written no file has no workspace.'
  );
}

async function isDirectory(path: string): Promise<boolean> {
  return stat(path).then(
    (s) => s.isDirectory(),
    () => false,
  );
}
