import { constants, type Stats } from 'node:fs';
import { type FileHandle, lstat, open, readdir, readlink, realpath } from 'node:fs/promises';
import path from 'node:path';
import { resolveInWorkspace } from '../tools/workspace.ts';
import { WorkspaceFileError } from './workspaceFileError.ts';
import { PASSED_OVER_DIRS } from './workspaceScan.ts';

/** A regular file of a task's workspace, as a listing shows it. */
export interface WorkspaceFileEntry {
  /** Relative to the workspace, `/`-separated. */
  path: string;
  bytes: number;
  modified: Date;
}

/**
 * Why an entry of the workspace is not among the listed files: a symlink (never followed by the walk), a FIFO, socket
 * or device, or one of the directories tools fill and make again (`node_modules`, `.git`, caches), listed once.
 */
export type OmittedReason = 'symlink' | 'special_file' | 'tool_directory';

export interface WorkspaceListing {
  /** Sorted by path. */
  files: WorkspaceFileEntry[];
  omitted: { path: string; reason: OmittedReason }[];
  /** More than `maxFiles` files: `files` holds the first ones by path. */
  truncated: boolean;
}

/** The most files a listing holds unless told otherwise: enough for any task's output, not for a dependency tree. */
export const DEFAULT_LISTING_MAX_FILES = 10_000;

/**
 * The regular files of a workspace (or of the directory `under` it), recursively, with size and modification time.
 * Symlinks are listed as omitted, never followed, so the walk stays inside; so are the directories of
 * {@link PASSED_OVER_DIRS}. Fails {@link WorkspaceFileError} `no_workspace` when the workspace is not there, and as
 * {@link openWorkspaceFile} does for an `under` that is outside it or missing.
 */
export async function listWorkspaceFiles(
  workspace: string,
  options: { under?: string; maxFiles?: number } = {},
): Promise<WorkspaceListing> {
  const root = await realWorkspace(workspace);
  const maxFiles = options.maxFiles ?? DEFAULT_LISTING_MAX_FILES;
  const start = options.under === undefined ? root : await resolved(root, options.under);
  const startStats = await lstat(start);
  const listing: WorkspaceListing = { files: [], omitted: [], truncated: false };
  const relativeOf = (absolute: string) => path.relative(root, absolute).split(path.sep).join('/');
  if (!startStats.isDirectory()) {
    if (startStats.isFile()) listing.files.push(entryOf(relativeOf(start), startStats));
    return listing;
  }
  const walk = async (dir: string): Promise<void> => {
    // A directory swapped for a link since it was listed must not take the walk out of the workspace.
    const real = await realpath(dir).catch(() => undefined);
    if (real === undefined || !isInside(root, real)) return;
    const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const entry of entries) {
      if (listing.truncated) return;
      const absolute = path.join(dir, entry.name);
      const relative = relativeOf(absolute);
      // Dirent types come from lstat: a symlink is never a directory or a file here.
      if (entry.isSymbolicLink()) listing.omitted.push({ path: relative, reason: 'symlink' });
      else if (entry.isDirectory() && PASSED_OVER_DIRS.has(entry.name))
        listing.omitted.push({ path: relative, reason: 'tool_directory' });
      else if (entry.isDirectory()) await walk(absolute);
      else if (!entry.isFile()) listing.omitted.push({ path: relative, reason: 'special_file' });
      else {
        // Gone since it was listed (a running step removed it): not listed.
        const stats = await lstat(absolute).catch(() => undefined);
        if (!stats?.isFile()) continue;
        if (listing.files.length >= maxFiles) {
          listing.truncated = true;
          return;
        }
        listing.files.push(entryOf(relative, stats));
      }
    }
  };
  await walk(start);
  // By whole path, as a listing promises (the walk goes directory by directory: `a/b` before `a.txt`).
  listing.files.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  return listing;
}

/** A workspace file opened for reading: the caller reads `handle` and closes it. */
export interface OpenedWorkspaceFile {
  /** Relative to the workspace, `/`-separated, as the file really is (a symlink inside resolved). */
  path: string;
  handle: FileHandle;
  bytes: number;
  modified: Date;
}

/**
 * Opens a file of the workspace by the path a person or client gave. Confined as the file tools are
 * ({@link resolveInWorkspace}): absolute paths, `..` escapes (percent-encoded too) and symlinks that lead out are
 * refused (`path_outside_workspace`); then the real path is opened without following a link and where the opened
 * file really is is checked again, so a directory swapped for a link in between leads nowhere. Fails
 * {@link WorkspaceFileError}: `no_workspace`, `path_outside_workspace`, `not_found`, `not_a_file`.
 */
export async function openWorkspaceFile(workspace: string, requested: string): Promise<OpenedWorkspaceFile> {
  const root = await realWorkspace(workspace);
  const target = await resolved(root, requested);
  let handle: FileHandle;
  try {
    handle = await open(target, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw notFound(requested);
    if (code === 'ELOOP') throw outside(requested, 'leads outside the workspace through a symlink');
    if (code === 'ENXIO') throw notAFile(requested, 'a socket or FIFO');
    throw error;
  }
  try {
    const stats = await handle.stat();
    if (stats.isDirectory()) throw notAFile(requested, 'a directory');
    if (!stats.isFile()) throw notAFile(requested, 'a device or other special file');
    const real = await readlink(`/proc/self/fd/${handle.fd}`).catch(() => undefined);
    if (real !== undefined && !isInside(root, real))
      throw outside(requested, 'leads outside the workspace through a symlink');
    const relative = path
      .relative(root, real ?? target)
      .split(path.sep)
      .join('/');
    return { path: relative, handle, bytes: stats.size, modified: stats.mtime };
  } catch (error) {
    await handle.close();
    throw error;
  }
}

const entryOf = (relative: string, stats: Stats): WorkspaceFileEntry => ({
  path: relative,
  bytes: stats.size,
  modified: stats.mtime,
});

async function realWorkspace(workspace: string): Promise<string> {
  try {
    const real = await realpath(workspace);
    if ((await lstat(real)).isDirectory()) return real;
  } catch {
    // Not there: said below.
  }
  throw new WorkspaceFileError('no_workspace', `no workspace at ${workspace}`);
}

/** The real path of `requested` in the workspace, which must exist; refusals as the file tools make them. */
async function resolved(root: string, requested: string): Promise<string> {
  try {
    return await resolveInWorkspace(root, requested, { tool: 'read', mustExist: true });
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (code === 'not_found') throw notFound(requested);
    if (code === 'path_outside_workspace') {
      // The resolver's reason, without its tool's name and the workspace's absolute path.
      const prefix = `read refused: path ${shown(requested)} `;
      const message = (error as Error).message;
      const why = message.startsWith(prefix) ? message.slice(prefix.length) : '';
      throw outside(requested, reasonOf(why));
    }
    throw error;
  }
}

const REASONS: [start: string, said: string][] = [
  ['is absolute', 'is absolute; give a path relative to the workspace'],
  ['leads outside', 'leads outside the workspace through a symlink'],
  ['goes through', 'goes through a symlink whose target does not exist'],
  ['contains a NUL', 'contains a NUL byte'],
];
const reasonOf = (why: string) =>
  REASONS.find(([start]) => why.startsWith(start))?.[1] ?? 'is outside the workspace';

const outside = (requested: string, why: string) =>
  new WorkspaceFileError('path_outside_workspace', `path ${shown(requested)} ${why}`);
const notFound = (requested: string) =>
  new WorkspaceFileError('not_found', `no file or directory ${shown(requested)} in the workspace`);
const notAFile = (requested: string, what: string) =>
  new WorkspaceFileError('not_a_file', `${shown(requested)} is ${what}, not a file`);

/** Containment by whole path segments, so `/tmp/ws-evil` is not inside `/tmp/ws`. */
function isInside(root: string, candidate: string): boolean {
  return candidate === root || candidate.startsWith(root.endsWith(path.sep) ? root : `${root}${path.sep}`);
}

function shown(requested: string): string {
  return /\p{Cc}/u.test(requested) ? JSON.stringify(requested) : requested;
}
