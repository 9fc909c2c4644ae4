import { createHash } from 'node:crypto';
import { constants } from 'node:fs';
import { open, readdir, readlink, realpath } from 'node:fs/promises';
import path from 'node:path';
import type { WorkspaceFile, WorkspaceManifest } from '@troupe/protocol';
import { WorkspaceLimitError, type WorkspaceLimits } from './workspaceLimits.ts';

/** What a scan of a workspace found: its regular files, and what it passed over (symlinks, FIFOs, sockets). */
export interface WorkspaceScan {
  files: WorkspaceManifest;
  skipped: string[];
  /** Directories of {@link PASSED_OVER_DIRS} found, which are not handed on. */
  passedOver: string[];
}

/**
 * Directories a step may fill with thousands of files that a tool makes again (installed dependencies, caches) or
 * that belong to one machine's tools (version control): not handed on to later steps, not counted against the
 * limits. A step that needs them on another host makes them there (`npm ci`, `git clone`).
 */
export const PASSED_OVER_DIRS: ReadonlySet<string> = new Set([
  'node_modules',
  '.git',
  '.hg',
  '.svn',
  '.venv',
  'venv',
  '__pycache__',
  '.pytest_cache',
  '.mypy_cache',
  '.cache',
]);

/**
 * The regular files of a workspace with their sizes and SHA-256s, by `/`-separated relative path. Symlinks are never
 * followed (a link to a file or out of the workspace is passed over, and said so), nor is anything that is not a
 * regular file or a directory, nor are the directories of {@link PASSED_OVER_DIRS}. Fails {@link WorkspaceLimitError}
 * past a limit, naming the file or the total.
 */
export async function scanWorkspace(root: string, limits: WorkspaceLimits): Promise<WorkspaceScan> {
  const realRoot = await realpath(root);
  const scan: WorkspaceScan = { files: {}, skipped: [], passedOver: [] };
  let total = 0;
  const walk = async (dir: string, relative: string): Promise<void> => {
    // A directory swapped for a link since it was listed must not take the walk out of the workspace.
    const real = await realpath(dir);
    if (real !== realRoot && !real.startsWith(realRoot + path.sep)) {
      scan.skipped.push(relative);
      return;
    }
    const entries = await readdir(dir, { withFileTypes: true });
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const entry of entries) {
      const child = relative === '' ? entry.name : `${relative}/${entry.name}`;
      // Dirent types come from lstat: a symlink is never a directory or a file here.
      if (entry.isDirectory() && PASSED_OVER_DIRS.has(entry.name)) scan.passedOver.push(child);
      else if (entry.isDirectory()) await walk(path.join(dir, entry.name), child);
      else if (!entry.isFile()) scan.skipped.push(child);
      else {
        const file = await hashFile(path.join(dir, entry.name), realRoot);
        if (file === undefined) {
          scan.skipped.push(child);
          continue;
        }
        if (file.bytes > limits.maxFileBytes) {
          throw new WorkspaceLimitError(
            `workspace file ${child} is ${file.bytes} bytes, over the ${limits.maxFileBytes}-byte limit for one file (TROUPE_WORKSPACE_MAX_FILE_MIB); it is not handed on to later steps`,
          );
        }
        total += file.bytes;
        if (total > limits.maxTaskBytes) {
          throw new WorkspaceLimitError(
            `the task's workspace files come to more than its ${limits.maxTaskBytes}-byte limit (TROUPE_WORKSPACE_MAX_TASK_MIB) at ${child}; they are not handed on to later steps`,
          );
        }
        if (Object.keys(scan.files).length >= limits.maxFiles) {
          throw new WorkspaceLimitError(
            `the task's workspace holds more than ${limits.maxFiles} files (at ${child}); they are not handed on to later steps`,
          );
        }
        scan.files[child] = file;
      }
    }
  };
  await walk(root, '');
  return scan;
}

/** A file's size and SHA-256, read without following a symlink; undefined when it is no longer a regular file. */
export async function hashFile(file: string, within?: string): Promise<WorkspaceFile | undefined> {
  const bytes = await readRegularFile(file, within);
  if (bytes === undefined) return undefined;
  return { bytes: bytes.length, sha256: createHash('sha256').update(bytes).digest('hex') };
}

/**
 * A regular file's bytes, opened with `O_NOFOLLOW`; undefined when it is gone, a link, or not a regular file, or —
 * given `within`, a real directory — when the file opened is not under it. `O_NOFOLLOW` guards the last component
 * only: a directory on the way swapped for a symlink after it was checked (a step at work in the workspace can do
 * that) would lead the open elsewhere, so where the opened file really is is read back from the open descriptor.
 */
export async function readRegularFile(file: string, within?: string): Promise<Buffer | undefined> {
  let handle: Awaited<ReturnType<typeof open>>;
  try {
    handle = await open(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ELOOP' || code === 'ENXIO') return undefined;
    throw error;
  }
  try {
    if (!(await handle.stat()).isFile()) return undefined;
    if (within !== undefined && !(await openedWithin(handle.fd, within))) return undefined;
    return await handle.readFile();
  } finally {
    await handle.close();
  }
}

/** Whether an open descriptor's file is under `dir`, where the system says (Linux's /proc); true where it cannot. */
async function openedWithin(fd: number, dir: string): Promise<boolean> {
  const real = await readlink(`/proc/self/fd/${fd}`).catch(() => undefined);
  return real === undefined || real.startsWith(dir + path.sep);
}
