import { lstat, realpath } from 'node:fs/promises';
import path from 'node:path';
import { errorMessage } from '@troupe/protocol';
import { ToolError } from './toolError.ts';

/** How `resolveInWorkspace` treats the path. */
export interface ResolveOptions {
  /** The tool asking, named in error messages. */
  tool: string;
  /** Refuse with `not_found` when nothing exists at the path. */
  mustExist?: boolean;
}

/**
 * Resolves a path a model gave, relative to the workspace, to an absolute real path inside it.
 * Refuses (`path_outside_workspace`) absolute paths, `..` escapes, percent-encoded escapes, NUL bytes, and symlinks
 * that lead out, including for paths that do not exist yet.
 *
 * @example
 * await resolveInWorkspace('/srv/task-42', 'src/app.ts', { tool: 'read_file', mustExist: true });
 * // '/srv/task-42/src/app.ts'
 */
export async function resolveInWorkspace(
  workspace: string,
  requested: string,
  opts: ResolveOptions,
): Promise<string> {
  return (await locateInWorkspace(workspace, requested, opts)).path;
}

/** A path resolved in the workspace, with what the resolution learnt of it on the way. */
export interface LocatedPath {
  /** The absolute real path, as {@link resolveInWorkspace} gives it. */
  path: string;
  /** Something is there (a file, a directory). */
  exists: boolean;
  /** Its parent directory is there: writing it makes no directory. */
  parentExists: boolean;
}

/**
 * {@link resolveInWorkspace}, also saying whether the path and its parent exist, as its walk found them: a tool that
 * writes needs no look of its own.
 */
export async function locateInWorkspace(
  workspace: string,
  requested: string,
  opts: ResolveOptions,
): Promise<LocatedPath> {
  const refuse = (why: string) =>
    new ToolError('path_outside_workspace', `${opts.tool} refused: path ${shown(requested)} ${why}`);
  const lexicalProblem = lexicalRefusal(requested, workspace);
  if (lexicalProblem !== undefined) throw refuse(lexicalProblem);

  const root = await realWorkspace(workspace, opts.tool);
  const target = path.resolve(root, requested);
  if (!isInside(root, target)) throw refuse(`is outside the workspace ${workspace}`);

  const resolved = await realpathOfDeepest(target, root);
  if (resolved === 'dangling') {
    throw refuse(
      `goes through a symlink whose target does not exist, so it cannot be kept inside the workspace ${workspace}`,
    );
  }
  if (!isInside(root, resolved.path))
    throw refuse(`leads outside the workspace ${workspace} through a symlink`);
  if (opts.mustExist && !resolved.exists) {
    throw new ToolError(
      'not_found',
      `${opts.tool}: no file or directory ${shown(requested)} in the workspace`,
    );
  }
  return resolved;
}

/** Why the path is refused before touching the file system, if it is. */
function lexicalRefusal(requested: string, workspace: string): string | undefined {
  for (const form of decodedForms(requested)) {
    const encoded = form === requested ? '' : ` (percent-decoded: ${shown(form)})`;
    // Backslashes count as separators so a Windows-style `..\..` cannot slip past the check.
    const slashed = form.replaceAll('\\', '/');
    if (slashed.includes('\0')) return `contains a NUL byte${encoded}`;
    if (path.posix.isAbsolute(slashed)) {
      return `is absolute${encoded}; give a path relative to the workspace ${workspace}`;
    }
    const normalized = path.posix.normalize(slashed);
    if (normalized === '..' || normalized.startsWith('../'))
      return `is outside the workspace ${workspace}${encoded}`;
  }
  return undefined;
}

/** The path and its percent-decodings, repeated so double encoding (`%252e`) is caught too. */
function decodedForms(requested: string): string[] {
  const forms = [requested];
  let current = requested;
  for (let round = 0; round < 4; round += 1) {
    const next = tryDecode(current);
    if (next === undefined || next === current) break;
    forms.push(next);
    current = next;
  }
  return forms;
}

function tryDecode(text: string): string | undefined {
  try {
    return decodeURIComponent(text);
  } catch {
    return undefined;
  }
}

async function realWorkspace(workspace: string, tool: string): Promise<string> {
  try {
    return await realpath(workspace);
  } catch (cause) {
    throw new ToolError(
      'failed',
      `${tool}: the workspace ${workspace} is not accessible (${errorMessage(cause)})`,
      {
        cause,
      },
    );
  }
}

/**
 * Real path of the deepest existing ancestor, with the missing rest appended: a path that does not exist yet
 * still cannot reach outside through a symlinked parent.
 */
async function realpathOfDeepest(target: string, root: string): Promise<LocatedPath | 'dangling'> {
  const missing: string[] = [];
  let current = target;
  const found = (real: string): LocatedPath => ({
    path: path.join(real, ...missing.reverse()),
    exists: missing.length === 0,
    parentExists: missing.length <= 1,
  });
  for (;;) {
    // The root is a real path already (the caller resolved it): no need to ask the file system again.
    if (current === root) return found(root);
    const real = await realpathIfExists(current);
    if (real !== undefined) return found(real);
    if (await entryExists(current)) return 'dangling';
    // The workspace root was realpath'd already, so the walk always ends at or above it.
    if (current === path.dirname(current)) return { path: target, exists: false, parentExists: false };
    missing.push(path.basename(current));
    current = path.dirname(current);
  }
}

async function realpathIfExists(candidate: string): Promise<string | undefined> {
  try {
    return await realpath(candidate);
  } catch (error) {
    if (isMissing(error)) return undefined;
    throw new ToolError('failed', `cannot resolve ${candidate}: ${errorMessage(error)}`, { cause: error });
  }
}

// realpath failed yet lstat finds an entry: a symlink whose target is missing.
async function entryExists(candidate: string): Promise<boolean> {
  try {
    await lstat(candidate);
    return true;
  } catch {
    return false;
  }
}

function isMissing(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  return code === 'ENOENT' || code === 'ENOTDIR';
}

/** Containment by whole path segments, so `/tmp/ws-evil` is not inside `/tmp/ws`. */
function isInside(root: string, candidate: string): boolean {
  const prefix = root.endsWith(path.sep) ? root : `${root}${path.sep}`;
  return candidate === root || candidate.startsWith(prefix);
}

function shown(requested: string): string {
  return /\p{Cc}/u.test(requested) ? JSON.stringify(requested) : requested;
}
