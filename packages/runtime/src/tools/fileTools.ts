import { randomUUID } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, readdir, readFile, realpath, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { errorMessage } from '@troupe/protocol';
import picomatch from 'picomatch';
import { z } from 'zod';
import { RegexWorker } from './regexWorker.ts';
import { defineTool, type Tool } from './tool.ts';
import { ToolError } from './toolError.ts';
import { locateInWorkspace, resolveInWorkspace } from './workspace.ts';

const maxReadBytes = 1024 * 1024;
const maxListEntries = 1000;

const ReadFileInput = z.object({
  path: z.string().min(1).describe('File path relative to the workspace'),
  offset: z.number().int().min(1).optional().describe('First line to read, counting from 1'),
  limit: z.number().int().min(1).optional().describe('How many lines to read'),
});

/** `read_file`: a text file of the workspace, whole (up to 1 MiB) or as a range of lines. */
export const readFileTool = defineTool({
  name: 'read_file',
  rerunnable: true,
  description:
    'Read a text file in the workspace. Files over 1 MiB must be read in ranges with offset (first line, from 1) and limit (lines).',
  input: ReadFileInput,
  async run({ path: requested, offset, limit }, ctx) {
    const file = await resolveInWorkspace(ctx.workspace, requested, { tool: 'read_file', mustExist: true });
    const info = await stat(file);
    if (info.isDirectory()) {
      throw new ToolError(
        'invalid_arguments',
        `read_file: ${requested} is a directory; use list_files to see inside`,
      );
    }
    if (offset === undefined && limit === undefined) {
      if (info.size > maxReadBytes) {
        throw new ToolError(
          'too_large',
          `read_file refused: ${requested} is ${info.size} bytes, over the 1 MiB limit; read it in ranges with offset and limit`,
        );
      }
      return readFile(file, { encoding: 'utf8', signal: ctx.signal });
    }
    return readLines(file, requested, offset ?? 1, limit, ctx.signal);
  },
});

async function readLines(
  file: string,
  requested: string,
  offset: number,
  limit: number | undefined,
  signal: AbortSignal,
): Promise<string> {
  const stream = createReadStream(file, { encoding: 'utf8' });
  const lines = createInterface({ input: stream, crlfDelay: Number.POSITIVE_INFINITY });
  const picked: string[] = [];
  let bytes = 0;
  let lineNumber = 0;
  try {
    for await (const line of lines) {
      signal.throwIfAborted();
      lineNumber += 1;
      if (lineNumber < offset) continue;
      picked.push(line);
      bytes += Buffer.byteLength(line) + 1;
      // Bounds memory for a huge `limit`; the executor's output cap would cut the text anyway.
      if (picked.length === limit || bytes > maxReadBytes) break;
    }
  } finally {
    lines.close();
    stream.destroy();
  }
  if (picked.length === 0 && lineNumber < offset) {
    throw new ToolError(
      'invalid_arguments',
      `read_file: offset ${offset} is past the end of ${requested}, which has ${lineNumber} lines`,
    );
  }
  return picked.join('\n');
}

const WriteFileInput = z.object({
  path: z
    .string()
    .min(1)
    .describe('File path relative to the workspace; missing parent directories are created'),
  content: z.string().describe('The complete new content of the file'),
});

/** `write_file`: creates or replaces a file of the workspace atomically, creating parent directories. */
export const writeFileTool = defineTool({
  name: 'write_file',
  rerunnable: true,
  description:
    'Create or overwrite a file in the workspace with the given content. Parent directories are created.',
  input: WriteFileInput,
  async run({ path: requested, content }, ctx) {
    const target = await locateInWorkspace(ctx.workspace, requested, { tool: 'write_file' });
    const file = target.path;
    // What the resolution found missing needs no look of its own (each is a trip to the file system's threads).
    const existing = target.exists ? await statIfExists(file) : undefined;
    if (existing?.isDirectory()) {
      throw new ToolError('invalid_arguments', `write_file: ${requested} is a directory, not a file`);
    }
    if (!target.parentExists) await mkdir(path.dirname(file), { recursive: true });
    await writeAtomically(file, content, existing?.mode ?? 0o666, ctx.signal);
    return `wrote ${Buffer.byteLength(content)} bytes to ${requested}`;
  },
});

// A reader never sees a half-written file: the content lands in a sibling temp file that is renamed over the target.
async function writeAtomically(
  file: string,
  content: string,
  mode: number,
  signal: AbortSignal,
): Promise<void> {
  const temp = path.join(path.dirname(file), `.${path.basename(file)}.${randomUUID()}.tmp`);
  try {
    await writeFile(temp, content, { flag: 'wx', mode: mode & 0o7777, signal });
    await rename(temp, file);
  } catch (error) {
    await rm(temp, { force: true });
    throw error;
  }
}

async function statIfExists(file: string) {
  try {
    return await stat(file);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}

const ListFilesInput = z.object({
  path: z
    .string()
    .min(1)
    .default('.')
    .describe('Directory relative to the workspace; the workspace itself by default'),
  recursive: z.boolean().default(false).describe('Also list the contents of subdirectories'),
});

/** `list_files`: entries of a workspace directory as workspace-relative paths, directories ending in `/`. */
export const listFilesTool = defineTool({
  name: 'list_files',
  rerunnable: true,
  description: `List a directory of the workspace as paths relative to the workspace, directories ending in "/", at most ${maxListEntries} entries. Symlinked directories are listed but not entered.`,
  input: ListFilesInput,
  async run({ path: requested, recursive }, ctx) {
    const dir = await resolveInWorkspace(ctx.workspace, requested, { tool: 'list_files', mustExist: true });
    if (!(await stat(dir)).isDirectory()) {
      throw new ToolError(
        'invalid_arguments',
        `list_files: ${requested} is a file, not a directory; use read_file`,
      );
    }
    const root = await realpath(ctx.workspace);
    const listing: Listing = { entries: [], capped: false };
    await walk(dir, path.relative(root, dir), recursive, listing, ctx.signal);
    if (listing.entries.length === 0) return '(empty directory)';
    const marker = listing.capped
      ? `\n…[listing capped at ${maxListEntries} entries; list a subdirectory to see more]`
      : '';
    return listing.entries.join('\n') + marker;
  },
});

interface Listing {
  entries: string[];
  capped: boolean;
}

// Depth-first with each directory sorted, so entries come in tree order and a capped listing is a true prefix.
async function walk(
  dir: string,
  relative: string,
  recursive: boolean,
  listing: Listing,
  signal: AbortSignal,
) {
  signal.throwIfAborted();
  const children = await readdir(dir, { withFileTypes: true });
  children.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const child of children) {
    if (listing.entries.length === maxListEntries) {
      listing.capped = true;
      return;
    }
    const childPath = relative === '' ? child.name : `${relative}/${child.name}`;
    // Dirent.isDirectory() is false for a symlink, so the walk never follows one out of the workspace.
    const isDir = child.isDirectory();
    listing.entries.push(isDir ? `${childPath}/` : childPath);
    if (isDir && recursive) await walk(path.join(dir, child.name), childPath, recursive, listing, signal);
    if (listing.capped) return;
  }
}

const maxEditBytes = 10 * 1024 * 1024;

const EditFileInput = z.object({
  path: z.string().min(1).describe('File path relative to the workspace; the file must exist'),
  old: z
    .string()
    .min(1)
    .describe(
      'The exact text to replace, including whitespace and indentation; must occur exactly once unless replaceAll is set',
    ),
  new: z.string().describe('The text to put in its place'),
  replaceAll: z
    .boolean()
    .default(false)
    .describe('Replace every occurrence instead of requiring exactly one'),
});

/** `edit_file`: exact string replacement in a workspace file, written atomically. */
export const editFileTool = defineTool({
  name: 'edit_file',
  description:
    'Replace exact text in an existing workspace file. `old` must match the file byte for byte (whitespace and indentation included) and occur exactly once; include surrounding lines to make it unique, or set replaceAll to replace every occurrence.',
  input: EditFileInput,
  async run({ path: requested, old, new: replacement, replaceAll }, ctx) {
    const file = await resolveInWorkspace(ctx.workspace, requested, { tool: 'edit_file', mustExist: true });
    const info = await stat(file);
    if (info.isDirectory()) {
      throw new ToolError('invalid_arguments', `edit_file: ${requested} is a directory, not a file`);
    }
    if (info.size > maxEditBytes) {
      throw new ToolError(
        'too_large',
        `edit_file refused: ${requested} is ${info.size} bytes, over the ${maxEditBytes / 1024 / 1024} MiB limit`,
      );
    }
    if (old === replacement) {
      throw new ToolError('invalid_arguments', 'edit_file: old and new are the same text; nothing to change');
    }
    const bytes = await readFile(file, { signal: ctx.signal });
    const content = bytes.toString('utf8');
    // Decoding replaces invalid bytes, so writing the text back would corrupt a binary or non-UTF-8 file.
    if (!Buffer.from(content, 'utf8').equals(bytes)) {
      throw new ToolError(
        'invalid_arguments',
        `edit_file refused: ${requested} is not UTF-8 text, and editing it as text would corrupt it`,
      );
    }
    const count = countOccurrences(content, old);
    // The message never quotes the file, so a failed edit cannot be used to read what a policy hides.
    if (count === 0) {
      throw new ToolError(
        'invalid_arguments',
        `edit_file: the text in old was not found in ${requested}; read the file again and copy the exact text, including whitespace`,
      );
    }
    if (count > 1 && !replaceAll) {
      throw new ToolError(
        'invalid_arguments',
        `edit_file: the text in old occurs ${count} times in ${requested}; add surrounding lines so it occurs once, or set replaceAll to replace all ${count}`,
      );
    }
    // split/join rather than String.replace, whose replacement string would interpret `$&` and friends.
    const edited = content.split(old).join(replacement);
    await writeAtomically(file, edited, info.mode, ctx.signal);
    return `replaced ${count} occurrence(s) in ${requested}`;
  },
});

function countOccurrences(content: string, text: string): number {
  let count = 0;
  for (let at = content.indexOf(text); at !== -1; at = content.indexOf(text, at + text.length)) count += 1;
  return count;
}

const maxSearchFileBytes = 1024 * 1024;
const maxShownLineChars = 300;
// Directories the walk does not enter; naming one as `path` still searches it.
const skippedDirs = new Set(['.git', 'node_modules']);

const SearchFilesInput = z.object({
  pattern: z.string().min(1).describe('JavaScript regular expression, matched against each line'),
  path: z
    .string()
    .min(1)
    .default('.')
    .describe('Directory (or file) relative to the workspace to search; the whole workspace by default'),
  glob: z
    .string()
    .min(1)
    .optional()
    .describe(
      'Only search files whose path relative to `path` matches this glob, e.g. "**/*.ts"; a glob without "/" matches file names',
    ),
  maxResults: z.number().int().min(1).max(2000).default(200).describe('Stop after this many matching lines'),
});

/** `search_files`: regex search over the text files of a workspace directory, as `path:line: text`. */
export const searchFilesTool = defineTool({
  name: 'search_files',
  rerunnable: true,
  description:
    'Search workspace files for lines matching a JavaScript regular expression. Returns "path:line: text" lines with paths relative to the workspace. Skips .git and node_modules (unless given as path), files over 1 MiB, binary files and symlinks.',
  input: SearchFilesInput,
  async run({ pattern, path: requested, glob, maxResults }, ctx) {
    const regex = compilePattern(pattern);
    const start = await resolveInWorkspace(ctx.workspace, requested, {
      tool: 'search_files',
      mustExist: true,
    });
    const root = await realpath(ctx.workspace);
    const search: Search = {
      matcher: new RegexWorker(regex, SEARCH_BUDGET_MS, ctx.signal),
      root,
      base: start,
      matchesGlob: globMatcher(glob),
      maxResults,
      hits: [],
      capped: false,
      signal: ctx.signal,
    };
    try {
      if ((await stat(start)).isDirectory()) await searchDir(start, search);
      else await searchFile(start, search);
    } finally {
      await search.matcher.close();
    }
    if (search.hits.length === 0) {
      const filter = glob === undefined ? '' : ` matching ${glob}`;
      return `no matches for /${pattern}/ in ${requested}${filter}`;
    }
    const marker = search.capped
      ? `\n…[capped at ${maxResults} matches; narrow the pattern, path or glob, or raise maxResults]`
      : '';
    return search.hits.join('\n') + marker;
  },
});

/** How long one search may spend matching, in all: a pattern that backtracks badly fails, it does not hang. */
const SEARCH_BUDGET_MS = 20_000;

interface Search {
  /** Runs the pattern off the event loop. */
  matcher: RegexWorker;
  root: string;
  /** The directory searched; globs match paths relative to it. */
  base: string;
  matchesGlob: (relative: string) => boolean;
  maxResults: number;
  hits: string[];
  capped: boolean;
  signal: AbortSignal;
}

function globMatcher(glob: string | undefined): (relative: string) => boolean {
  if (glob === undefined) return () => true;
  const isMatch = picomatch(glob, { dot: true });
  // picomatch's own `basename` option applies to every pattern, so a glob with a slash could never match.
  return glob.includes('/') ? isMatch : (relative) => isMatch(path.posix.basename(relative));
}

function compilePattern(pattern: string): RegExp {
  try {
    return new RegExp(pattern);
  } catch (cause) {
    const reason = errorMessage(cause);
    throw new ToolError(
      'invalid_arguments',
      `search_files: pattern is not a valid regular expression: ${reason}`,
      {
        cause,
      },
    );
  }
}

// Sorted depth-first like list_files; Dirent types come from lstat, so symlinks (to files or out of the workspace) are never followed.
async function searchDir(dir: string, search: Search): Promise<void> {
  search.signal.throwIfAborted();
  const children = await readdir(dir, { withFileTypes: true });
  children.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const child of children) {
    if (search.capped) return;
    const childPath = path.join(dir, child.name);
    if (child.isDirectory() && !skippedDirs.has(child.name)) await searchDir(childPath, search);
    else if (child.isFile() && search.matchesGlob(toPosix(path.relative(search.base, childPath)))) {
      await searchFile(childPath, search);
    }
  }
}

async function searchFile(file: string, search: Search): Promise<void> {
  const info = await stat(file);
  // Not a regular file (a FIFO would block the read) or too big to be source text.
  if (!info.isFile() || info.size > maxSearchFileBytes) return;
  const bytes = await readFile(file, { signal: search.signal });
  if (bytes.includes(0)) return;
  const shownPath = toPosix(path.relative(search.root, file));
  const lines = bytes.toString('utf8').split(/\r?\n/);
  // A final newline ends the last line; it does not start an empty one.
  if (lines.at(-1) === '') lines.pop();
  // One more than fits, to know whether the results were capped.
  const matching = await search.matcher.match(lines, search.maxResults - search.hits.length + 1);
  for (const index of matching) {
    if (search.hits.length === search.maxResults) {
      search.capped = true;
      return;
    }
    const line = lines[index] ?? '';
    const shown = line.length > maxShownLineChars ? `${line.slice(0, maxShownLineChars)}…` : line;
    search.hits.push(`${shownPath}:${index + 1}: ${shown}`);
  }
}

function toPosix(relative: string): string {
  return relative.split(path.sep).join('/');
}

/** The built-in file tools, ready to register. */
export const fileTools: readonly Tool[] = [
  readFileTool,
  writeFileTool,
  listFilesTool,
  editFileTool,
  searchFilesTool,
];
