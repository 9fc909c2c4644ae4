import { chmod, mkdir, readdir, readFile, realpath, stat, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { fileTools, listFilesTool, readFileTool, writeFileTool } from '../../src/tools/fileTools.ts';
import type { Tool, ToolContext } from '../../src/tools/tool.ts';
import { ToolError } from '../../src/tools/toolError.ts';
import { useTempDirs } from './tempDirs.ts';

const tempDir = useTempDirs();

async function workspace(): Promise<string> {
  return realpath(await tempDir());
}

function contextFor(ws: string): ToolContext {
  return {
    workspace: ws,
    taskId: 'task-1',
    agent: 'coder',
    callId: 'call-1',
    signal: new AbortController().signal,
  };
}

/** Runs a tool the way the executor does: arguments through the schema first. */
async function call<I>(tool: Tool<I>, ws: string, args: unknown): Promise<string> {
  return tool.run(tool.input.parse(args), contextFor(ws));
}

async function failure(promise: Promise<unknown>): Promise<ToolError> {
  const error = await promise.then(
    () => undefined,
    (thrown: unknown) => thrown,
  );
  if (!(error instanceof ToolError)) throw new Error(`expected a ToolError, got ${String(error)}`);
  return error;
}

const lines = (count: number) => Array.from({ length: count }, (_, i) => `line ${i + 1}`).join('\n');

describe('read_file', () => {
  it('reads a whole file', async () => {
    const ws = await workspace();
    await writeFile(path.join(ws, 'a.txt'), 'héllo\nworld\n');
    await expect(call(readFileTool, ws, { path: 'a.txt' })).resolves.toBe('héllo\nworld\n');
  });

  it('reads a range of lines, counting from 1', async () => {
    const ws = await workspace();
    await writeFile(path.join(ws, 'a.txt'), lines(10));
    await expect(call(readFileTool, ws, { path: 'a.txt', offset: 3, limit: 2 })).resolves.toBe(
      'line 3\nline 4',
    );
    await expect(call(readFileTool, ws, { path: 'a.txt', offset: 9 })).resolves.toBe('line 9\nline 10');
    await expect(call(readFileTool, ws, { path: 'a.txt', limit: 1 })).resolves.toBe('line 1');
  });

  it('says when the offset is past the end', async () => {
    const ws = await workspace();
    await writeFile(path.join(ws, 'a.txt'), lines(3));
    const error = await failure(call(readFileTool, ws, { path: 'a.txt', offset: 7 }));
    expect(error.code).toBe('invalid_arguments');
    expect(error.message).toBe('read_file: offset 7 is past the end of a.txt, which has 3 lines');
  });

  it('refuses a file over 1 MiB unless it is read in ranges', async () => {
    const ws = await workspace();
    const big = `${'x'.repeat(1024 * 1024)}\nlast line`;
    await writeFile(path.join(ws, 'big.log'), big);
    const error = await failure(call(readFileTool, ws, { path: 'big.log' }));
    expect(error.code).toBe('too_large');
    expect(error.message).toContain('read it in ranges with offset and limit');
    await expect(call(readFileTool, ws, { path: 'big.log', offset: 2, limit: 1 })).resolves.toBe('last line');
  });

  it('reads a file of exactly 1 MiB whole', async () => {
    const ws = await workspace();
    await writeFile(path.join(ws, 'edge.txt'), 'y'.repeat(1024 * 1024));
    expect((await call(readFileTool, ws, { path: 'edge.txt' })).length).toBe(1024 * 1024);
  });

  it('reports a missing file as not_found', async () => {
    const ws = await workspace();
    const error = await failure(call(readFileTool, ws, { path: 'src/missing.ts' }));
    expect(error.code).toBe('not_found');
    expect(error.message).toBe('read_file: no file or directory src/missing.ts in the workspace');
  });

  it('points a directory to list_files', async () => {
    const ws = await workspace();
    await mkdir(path.join(ws, 'src'));
    const error = await failure(call(readFileTool, ws, { path: 'src' }));
    expect(error.code).toBe('invalid_arguments');
    expect(error.message).toContain('use list_files');
  });

  it('refuses a path outside the workspace', async () => {
    const ws = await workspace();
    expect((await failure(call(readFileTool, ws, { path: '../../etc/passwd' }))).code).toBe(
      'path_outside_workspace',
    );
  });

  it('rejects a zero or fractional range in its schema', () => {
    expect(readFileTool.input.safeParse({ path: 'a', offset: 0 }).success).toBe(false);
    expect(readFileTool.input.safeParse({ path: 'a', limit: 1.5 }).success).toBe(false);
    expect(readFileTool.input.safeParse({ path: '' }).success).toBe(false);
  });
});

describe('write_file', () => {
  it('creates the file and its missing parent directories', async () => {
    const ws = await workspace();
    await expect(
      call(writeFileTool, ws, { path: 'src/deep/new.ts', content: 'const ä = 1;\n' }),
    ).resolves.toBe('wrote 14 bytes to src/deep/new.ts');
    await expect(readFile(path.join(ws, 'src', 'deep', 'new.ts'), 'utf8')).resolves.toBe('const ä = 1;\n');
  });

  it('replaces an existing file, keeping its mode and leaving no temp file', async () => {
    const ws = await workspace();
    const file = path.join(ws, 'run.sh');
    await writeFile(file, 'old');
    await chmod(file, 0o750);
    await call(writeFileTool, ws, { path: 'run.sh', content: 'new' });
    await expect(readFile(file, 'utf8')).resolves.toBe('new');
    expect((await stat(file)).mode & 0o777).toBe(0o750);
    await expect(readdir(ws)).resolves.toEqual(['run.sh']);
  });

  it('writes an empty file', async () => {
    const ws = await workspace();
    await expect(call(writeFileTool, ws, { path: 'empty', content: '' })).resolves.toBe(
      'wrote 0 bytes to empty',
    );
    await expect(readFile(path.join(ws, 'empty'), 'utf8')).resolves.toBe('');
  });

  it('refuses to write outside the workspace and creates nothing', async () => {
    const parent = await workspace();
    const ws = path.join(parent, 'ws');
    await mkdir(ws);
    const error = await failure(call(writeFileTool, ws, { path: '../escaped/x.txt', content: 'x' }));
    expect(error.code).toBe('path_outside_workspace');
    expect(error.message).toBe(`write_file refused: path ../escaped/x.txt is outside the workspace ${ws}`);
    await expect(readdir(parent)).resolves.toEqual(['ws']);
  });

  it('refuses to write through a symlinked directory that points out', async () => {
    const parent = await workspace();
    const ws = path.join(parent, 'ws');
    const outside = path.join(parent, 'outside');
    await mkdir(ws);
    await mkdir(outside);
    await symlink(outside, path.join(ws, 'link'));
    const error = await failure(call(writeFileTool, ws, { path: 'link/sub/x.txt', content: 'x' }));
    expect(error.code).toBe('path_outside_workspace');
    await expect(readdir(outside)).resolves.toEqual([]);
  });

  it('refuses to replace a directory', async () => {
    const ws = await workspace();
    await mkdir(path.join(ws, 'src'));
    const error = await failure(call(writeFileTool, ws, { path: 'src', content: 'x' }));
    expect(error.code).toBe('invalid_arguments');
    expect((await stat(path.join(ws, 'src'))).isDirectory()).toBe(true);
  });
});

describe('list_files', () => {
  async function tree(): Promise<string> {
    const ws = await workspace();
    await mkdir(path.join(ws, 'src', 'lib'), { recursive: true });
    await mkdir(path.join(ws, 'docs'));
    await writeFile(path.join(ws, 'b.txt'), '');
    await writeFile(path.join(ws, '.env'), '');
    await writeFile(path.join(ws, 'src', 'main.ts'), '');
    await writeFile(path.join(ws, 'src', 'lib', 'util.ts'), '');
    return ws;
  }

  it('lists the workspace, sorted, directories with a trailing slash', async () => {
    const ws = await tree();
    await expect(call(listFilesTool, ws, {})).resolves.toBe(['.env', 'b.txt', 'docs/', 'src/'].join('\n'));
  });

  it('lists recursively in tree order', async () => {
    const ws = await tree();
    await expect(call(listFilesTool, ws, { recursive: true })).resolves.toBe(
      ['.env', 'b.txt', 'docs/', 'src/', 'src/lib/', 'src/lib/util.ts', 'src/main.ts'].join('\n'),
    );
  });

  it('gives paths relative to the workspace when listing a subdirectory', async () => {
    const ws = await tree();
    await expect(call(listFilesTool, ws, { path: 'src' })).resolves.toBe('src/lib/\nsrc/main.ts');
    await expect(call(listFilesTool, ws, { path: './src/lib/' })).resolves.toBe('src/lib/util.ts');
  });

  it('says when a directory is empty', async () => {
    const ws = await tree();
    await expect(call(listFilesTool, ws, { path: 'docs' })).resolves.toBe('(empty directory)');
  });

  it('caps a listing at 1000 entries with a marker', async () => {
    const ws = await workspace();
    await Promise.all(
      Array.from({ length: 1001 }, (_, i) => writeFile(path.join(ws, `f${String(i).padStart(4, '0')}`), '')),
    );
    const output = (await call(listFilesTool, ws, {})).split('\n');
    expect(output).toHaveLength(1001);
    expect(output[0]).toBe('f0000');
    expect(output[999]).toBe('f0999');
    expect(output[1000]).toBe('…[listing capped at 1000 entries; list a subdirectory to see more]');
  });

  it('does not mark exactly 1000 entries as capped', async () => {
    const ws = await workspace();
    await Promise.all(Array.from({ length: 1000 }, (_, i) => writeFile(path.join(ws, `f${i}`), '')));
    const output = await call(listFilesTool, ws, {});
    expect(output.split('\n')).toHaveLength(1000);
    expect(output).not.toContain('capped');
  });

  it('lists a symlinked directory without entering it', async () => {
    const parent = await workspace();
    const ws = path.join(parent, 'ws');
    await mkdir(ws);
    await mkdir(path.join(parent, 'outside'));
    await writeFile(path.join(parent, 'outside', 'secret.txt'), 's');
    await symlink(path.join(parent, 'outside'), path.join(ws, 'link'));
    await expect(call(listFilesTool, ws, { recursive: true })).resolves.toBe('link');
    expect((await failure(call(listFilesTool, ws, { path: 'link' }))).code).toBe('path_outside_workspace');
  });

  it('refuses a file, a missing directory and a path outside', async () => {
    const ws = await tree();
    expect((await failure(call(listFilesTool, ws, { path: 'b.txt' }))).message).toBe(
      'list_files: b.txt is a file, not a directory; use read_file',
    );
    expect((await failure(call(listFilesTool, ws, { path: 'nope' }))).code).toBe('not_found');
    expect((await failure(call(listFilesTool, ws, { path: '..' }))).code).toBe('path_outside_workspace');
  });
});

describe('fileTools', () => {
  it('holds the five file tools', () => {
    expect(fileTools.map((tool) => tool.name)).toEqual([
      'read_file',
      'write_file',
      'list_files',
      'edit_file',
      'search_files',
    ]);
  });
});
