import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { listWorkspaceFiles, openWorkspaceFile, WorkspaceFileError } from '../../src/index.ts';

let root: string;
let workspace: string;
beforeEach(async () => {
  root = await mkdtemp(path.join(tmpdir(), 'troupe-ws-files-'));
  workspace = path.join(root, 'demo', 't-1');
  await mkdir(path.join(workspace, 'a', 'b'), { recursive: true });
  await writeFile(path.join(workspace, 'a', 'b', 'deep.txt'), 'deep');
  await writeFile(path.join(workspace, 'a.txt'), 'top');
  await writeFile(path.join(workspace, 'z.md'), '# z');
  await mkdir(path.join(workspace, '.git'));
  await writeFile(path.join(workspace, '.git', 'HEAD'), 'ref');
  await writeFile(path.join(root, 'secret.txt'), 'outside');
  await symlink(path.join(root, 'secret.txt'), path.join(workspace, 'out.txt'));
  await symlink(root, path.join(workspace, 'up'));
  await symlink('z.md', path.join(workspace, 'in.md'));
});
afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

const codeOf = (work: Promise<unknown>) =>
  work.then(
    () => 'ok',
    (error: unknown) => (WorkspaceFileError.is(error) ? error.code : `not a WorkspaceFileError: ${error}`),
  );

describe('listWorkspaceFiles', () => {
  it('lists regular files by whole path, names links and tool directories, and never walks out', async () => {
    const listing = await listWorkspaceFiles(workspace);
    expect(listing.files.map((f) => [f.path, f.bytes])).toEqual([
      ['a.txt', 3],
      ['a/b/deep.txt', 4],
      ['z.md', 3],
    ]);
    expect(listing.omitted).toEqual([
      { path: '.git', reason: 'tool_directory' },
      { path: 'in.md', reason: 'symlink' },
      { path: 'out.txt', reason: 'symlink' },
      { path: 'up', reason: 'symlink' },
    ]);
    expect(listing.truncated).toBe(false);
    expect(listing.files[0]?.modified).toBeInstanceOf(Date);
  });

  it('lists under a directory, stops at maxFiles saying so, and refuses a start outside', async () => {
    const under = await listWorkspaceFiles(workspace, { under: 'a' });
    expect(under.files.map((f) => f.path)).toEqual(['a/b/deep.txt']);
    const capped = await listWorkspaceFiles(workspace, { maxFiles: 2 });
    expect(capped.files).toHaveLength(2);
    expect(capped.truncated).toBe(true);
    expect(await codeOf(listWorkspaceFiles(workspace, { under: '../..' }))).toBe('path_outside_workspace');
    expect(await codeOf(listWorkspaceFiles(workspace, { under: 'up' }))).toBe('path_outside_workspace');
    expect(await codeOf(listWorkspaceFiles(path.join(root, 'demo', 'gone')))).toBe('no_workspace');
  });
});

describe('openWorkspaceFile', () => {
  it('opens a file inside, a link that stays inside as its target, and tells its size', async () => {
    const file = await openWorkspaceFile(workspace, 'a/b/deep.txt');
    try {
      expect(file).toMatchObject({ path: 'a/b/deep.txt', bytes: 4 });
      expect((await file.handle.readFile()).toString()).toBe('deep');
    } finally {
      await file.handle.close();
    }
    const linked = await openWorkspaceFile(workspace, 'in.md');
    await linked.handle.close();
    expect(linked.path).toBe('z.md');
  });

  it('refuses what leads out, and says what is missing or no file, without the workspace’s place', async () => {
    for (const requested of [
      '../../secret.txt',
      '/etc/hostname',
      '%2e%2e%2f%2e%2e%2fsecret.txt',
      'out.txt',
      'up/secret.txt',
    ]) {
      expect(await codeOf(openWorkspaceFile(workspace, requested)), requested).toBe('path_outside_workspace');
    }
    const error = await openWorkspaceFile(workspace, 'out.txt').catch((e: Error) => e);
    expect((error as Error).message).toBe('path out.txt leads outside the workspace through a symlink');
    expect(await codeOf(openWorkspaceFile(workspace, 'nope.txt'))).toBe('not_found');
    expect(await codeOf(openWorkspaceFile(workspace, 'a'))).toBe('not_a_file');
    expect(await codeOf(openWorkspaceFile(path.join(root, 'demo', 'gone'), 'a.txt'))).toBe('no_workspace');
  });

  it('refuses a FIFO at once, with no writer, and lists it as a special file', async () => {
    // Opened as a file, a FIFO with no writer would block the open (and a thread of libuv's pool) for good.
    execFileSync('mkfifo', [path.join(workspace, 'pipe')]);
    expect(await codeOf(openWorkspaceFile(workspace, 'pipe'))).toBe('not_a_file');
    const listing = await listWorkspaceFiles(workspace);
    expect(listing.omitted).toContainEqual({ path: 'pipe', reason: 'special_file' });
    expect(listing.files.map((f) => f.path)).not.toContain('pipe');
  }, 5_000);
});
