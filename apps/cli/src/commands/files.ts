import { stat } from 'node:fs/promises';
import { pipeline as pipe } from 'node:stream/promises';
import { OperationError, readTask } from '@troupe/client';
import type { WorkflowRecord } from '@troupe/protocol';
import {
  listWorkspaceFiles,
  openWorkspaceFile,
  resolveInWorkspace,
  WorkspaceFileError,
  type WorkspaceListing,
  withTimeout,
} from '@troupe/runtime';
import { exitWhenStdoutCloses } from '../closedPipe.ts';
import { alignColumns } from '../format/table.ts';
import { CliError, checkTaskId, connectCli, type ServerOptions } from '../server.ts';
import { elsewhereHint, workspaceHere, workspacesOfTask, workspacesRoot } from '../taskWorkspaces.ts';

export interface FilesOptions extends ServerOptions {
  /** Where workspaces are, when not under the home (a worker's volume). */
  workspaces?: string;
  /** Print a binary file on a terminal all the same. */
  force: boolean;
  json: boolean;
}

/** How long the server is asked about the task before the answer is given without it. */
const ASK_SERVER_MS = 5_000;

/** How much of a file is looked at to tell text from binary. */
const SNIFF_BYTES = 8_192;

/**
 * `troupe files <task> [path]`: lists a task's workspace files (recursively, or under a directory), or prints one as
 * it is. The workspace is looked for on this host's disk first, so it works with no server running; the server is
 * asked only to say why it is not here.
 */
export async function files(
  taskId: string,
  path: string | undefined,
  options: FilesOptions,
): Promise<number> {
  checkTaskId(taskId);
  exitWhenStdoutCloses();
  const { pipeline, dir } = await locate(taskId, options);
  const isDir =
    path === undefined ||
    (await stat(await confined(dir, path)).then(
      (s) => s.isDirectory(),
      () => false,
    ));
  if (isDir) {
    const listing = await workspaceCall(() =>
      listWorkspaceFiles(dir, path === undefined ? {} : { under: path }),
    );
    if (options.json) {
      process.stdout.write(`${JSON.stringify(listingJson(taskId, pipeline, dir, listing))}\n`);
      return 0;
    }
    process.stdout.write(formatListing(taskId, pipeline, dir, listing, path));
    if (listing.files.length > 0 && process.stdout.isTTY) {
      process.stderr.write(`print one: troupe files ${taskId} ${listing.files[0]?.path}\n`);
    }
    return 0;
  }
  return printFile(taskId, dir, path, options);
}

/** The task's workspace on this host, or an error saying whether the task is known and where its files are. */
async function locate(taskId: string, options: FilesOptions): Promise<{ pipeline: string; dir: string }> {
  const root = workspacesRoot(options);
  const found = await workspacesOfTask(root, taskId);
  const [only] = found;
  if (only && found.length === 1) return only;
  const record = await askServer(taskId, options);
  if (record.ok) {
    const dir = await workspaceHere(root, record.value.pipeline, taskId);
    if (dir) return { pipeline: record.value.pipeline, dir };
    throw new CliError(
      `task ${taskId} (${record.value.pipeline}, ${record.value.status}) has no workspace on this host (nothing at ${root}/${record.value.pipeline}/${taskId}): ${elsewhereHint(taskId, record.value.pipeline)}`,
    );
  }
  if (record.reason === 'unknown') {
    throw new CliError(`no task ${taskId} is known on this server, and no workspace of it is under ${root}`);
  }
  throw new CliError(
    `no workspace of task ${taskId} is under ${root}, and the server could not be asked about it (${record.reason}). ` +
      'Run troupe files on the host that ran the task, or give --home or --workspaces.',
  );
}

type Asked = { ok: true; value: WorkflowRecord } | { ok: false; reason: string };

/** The task's record, or why there is none: `unknown` when the server does not know the task. */
async function askServer(taskId: string, options: FilesOptions): Promise<Asked> {
  let bus: Awaited<ReturnType<typeof connectCli>>;
  try {
    bus = await connectCli(options, 'troupe-files');
  } catch (error) {
    return { ok: false, reason: (error as Error).message };
  }
  try {
    const record = await withTimeout(readTask(bus, taskId), ASK_SERVER_MS);
    if (record === 'timeout')
      return { ok: false, reason: `it did not answer within ${ASK_SERVER_MS / 1000} s` };
    return { ok: true, value: record };
  } catch (error) {
    if (OperationError.is(error, 'not_found')) return { ok: false, reason: 'unknown' };
    return { ok: false, reason: (error as Error).message };
  } finally {
    await bus.close();
  }
}

/** The real path of `path` in the workspace, refused as the file tools refuse one that leads out. */
async function confined(dir: string, path: string): Promise<string> {
  return workspaceCall(() => resolveInWorkspace(dir, path, { tool: 'troupe files', mustExist: true }));
}

/** Runs a workspace operation, its refusals (outside, missing, not a file) becoming a user's error. */
async function workspaceCall<T>(operation: () => Promise<T>): Promise<T> {
  try {
    return await operation();
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (
      WorkspaceFileError.is(error) ||
      code === 'path_outside_workspace' ||
      code === 'not_found' ||
      code === 'failed'
    ) {
      // The resolver names its asker (`troupe files refused: …`); the CLI's own prefix says that already.
      throw new CliError(
        (error as Error).message.replace(/^troupe files(?: (refused))?: /, (_m, refused?: string) =>
          refused ? 'refused: ' : '',
        ),
      );
    }
    throw error;
  }
}

/** Writes the file to stdout as it is; a binary one to a terminal only with --force, else says how to save it. */
async function printFile(taskId: string, dir: string, path: string, options: FilesOptions): Promise<number> {
  const file = await workspaceCall(() => openWorkspaceFile(dir, path));
  try {
    if (process.stdout.isTTY && !options.force) {
      const head = Buffer.alloc(Math.min(SNIFF_BYTES, file.bytes));
      const { bytesRead } = await file.handle.read(head, 0, head.length, 0);
      if (looksBinary(head.subarray(0, bytesRead))) {
        throw new CliError(
          `${file.path} is binary (${file.bytes} bytes): save it with troupe files ${taskId} ${file.path} > ${file.path.split('/').at(-1)}, or print it here with --force`,
        );
      }
    }
    await pipe(file.handle.createReadStream({ start: 0, autoClose: false }), process.stdout, { end: false });
    return 0;
  } finally {
    await file.handle.close();
  }
}

/** Binary: a NUL byte, or bytes that are not UTF-8 (a sequence cut at the end of the sample does not count). */
function looksBinary(sample: Buffer): boolean {
  if (sample.includes(0)) return true;
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(sample, { stream: true });
    return false;
  } catch {
    return true;
  }
}

/** The listing as `--json` prints it: the gateway's shape, with the workspace's place on this host. */
function listingJson(taskId: string, pipeline: string, dir: string, listing: WorkspaceListing) {
  return {
    taskId,
    pipeline,
    workspace: dir,
    files: listing.files.map((f) => ({ path: f.path, bytes: f.bytes, modified: f.modified.toISOString() })),
    omitted: listing.omitted,
    truncated: listing.truncated,
  };
}

/** A header, then the files as a tree (size, modified, name indented under its directories), then what was left out. */
function formatListing(
  taskId: string,
  pipeline: string,
  dir: string,
  listing: WorkspaceListing,
  under: string | undefined,
): string {
  const total = listing.files.reduce((sum, f) => sum + f.bytes, 0);
  const count = `${listing.files.length} file${listing.files.length === 1 ? '' : 's'}`;
  const lines = [
    `task ${taskId} (${pipeline}): ${count}, ${humanBytes(total)}${under === undefined ? '' : ` under ${under}`}, in ${dir}`,
  ];
  const rows: string[][] = [];
  let shown: string[] = [];
  for (const file of listing.files) {
    const parts = file.path.split('/');
    const dirs = parts.slice(0, -1);
    let same = 0;
    while (same < dirs.length && same < shown.length && dirs[same] === shown[same]) same += 1;
    for (let depth = same; depth < dirs.length; depth += 1) {
      rows.push(['', '', `${'  '.repeat(depth)}${dirs[depth]}/`]);
    }
    shown = dirs;
    rows.push([
      humanBytes(file.bytes),
      file.modified.toISOString().slice(0, 19).replace('T', ' '),
      `${'  '.repeat(dirs.length)}${parts.at(-1)}`,
    ]);
  }
  lines.push(...alignColumns(rows, { right: [0] }).map((line) => `  ${line}`));
  if (listing.files.length === 0) lines.push('  (no files)');
  if (listing.truncated)
    lines.push(`  … more files than a listing holds: these are the first ${listing.files.length}`);
  if (listing.omitted.length > 0) {
    const said = listing.omitted.map(
      (o) => `${o.path}${o.reason === 'tool_directory' ? '/' : ''} (${REASONS[o.reason]})`,
    );
    lines.push(`not listed: ${said.join(', ')}`);
  }
  return `${lines.join('\n')}\n`;
}

const REASONS: Record<WorkspaceListing['omitted'][number]['reason'], string> = {
  symlink: 'symlink',
  special_file: 'not a regular file',
  tool_directory: 'dependencies, caches or version control',
};

function humanBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${(bytes / (1024 * 1024)).toFixed(1)} MiB`;
}
