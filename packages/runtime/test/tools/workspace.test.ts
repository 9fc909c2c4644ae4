import { mkdir, realpath, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ToolError } from '../../src/tools/toolError.ts';
import { locateInWorkspace, resolveInWorkspace } from '../../src/tools/workspace.ts';
import { useTempDirs } from './tempDirs.ts';

const tempDir = useTempDirs();

/** A workspace `ws` and, beside it, a directory `ws-evil` whose name starts with the workspace's. */
async function setup() {
  const parent = await realpath(await tempDir());
  const ws = path.join(parent, 'ws');
  const evil = path.join(parent, 'ws-evil');
  await mkdir(path.join(ws, 'src'), { recursive: true });
  await mkdir(evil);
  await writeFile(path.join(ws, 'src', 'app.ts'), 'export {};\n');
  await writeFile(path.join(evil, 'secret.txt'), 'top secret');
  return { parent, ws, evil };
}

async function refusal(promise: Promise<unknown>): Promise<ToolError> {
  const error = await promise.then(
    () => undefined,
    (thrown: unknown) => thrown,
  );
  if (!(error instanceof ToolError)) throw new Error(`expected a ToolError, got ${String(error)}`);
  return error;
}

describe('resolveInWorkspace: paths inside', () => {
  it('returns the absolute real path of an existing file', async () => {
    const { ws } = await setup();
    await expect(resolveInWorkspace(ws, 'src/app.ts', { tool: 'read_file', mustExist: true })).resolves.toBe(
      path.join(ws, 'src', 'app.ts'),
    );
  });

  it('resolves the workspace itself for "." and ""', async () => {
    const { ws } = await setup();
    await expect(resolveInWorkspace(ws, '.', { tool: 'list_files' })).resolves.toBe(ws);
    await expect(resolveInWorkspace(ws, '', { tool: 'list_files' })).resolves.toBe(ws);
  });

  it('allows a .. detour that stays inside', async () => {
    const { ws } = await setup();
    await expect(resolveInWorkspace(ws, 'src/../src/app.ts', { tool: 'read_file' })).resolves.toBe(
      path.join(ws, 'src', 'app.ts'),
    );
  });

  it('resolves a path that does not exist yet, below missing directories', async () => {
    const { ws } = await setup();
    await expect(resolveInWorkspace(ws, 'new/deep/file.ts', { tool: 'write_file' })).resolves.toBe(
      path.join(ws, 'new', 'deep', 'file.ts'),
    );
  });

  it('refuses a missing path with not_found when it must exist', async () => {
    const { ws } = await setup();
    const error = await refusal(
      resolveInWorkspace(ws, 'src/nope.ts', { tool: 'read_file', mustExist: true }),
    );
    expect(error.code).toBe('not_found');
    expect(error.message).toBe('read_file: no file or directory src/nope.ts in the workspace');
  });

  it('follows a symlink that stays inside to its real path', async () => {
    const { ws } = await setup();
    await symlink(path.join(ws, 'src'), path.join(ws, 'code'));
    await expect(resolveInWorkspace(ws, 'code/app.ts', { tool: 'read_file', mustExist: true })).resolves.toBe(
      path.join(ws, 'src', 'app.ts'),
    );
  });

  it('realpaths a workspace that is itself reached through a symlink', async () => {
    const { parent, ws } = await setup();
    const alias = path.join(parent, 'alias');
    await symlink(ws, alias);
    await expect(resolveInWorkspace(alias, 'src/app.ts', { tool: 'read_file' })).resolves.toBe(
      path.join(ws, 'src', 'app.ts'),
    );
  });

  it('fails clearly when the workspace does not exist', async () => {
    const { parent } = await setup();
    const error = await refusal(resolveInWorkspace(path.join(parent, 'gone'), 'a', { tool: 'read_file' }));
    expect(error.code).toBe('failed');
    expect(error.message).toContain('is not accessible');
  });
});

describe('resolveInWorkspace: refusals', () => {
  it('refuses a .. escape with an actionable message', async () => {
    const { ws } = await setup();
    const error = await refusal(resolveInWorkspace(ws, '../etc/passwd', { tool: 'write_file' }));
    expect(error.code).toBe('path_outside_workspace');
    expect(error.message).toBe(`write_file refused: path ../etc/passwd is outside the workspace ${ws}`);
  });

  it.each(['..', 'src/../../x', 'src/../..', './../ws/../../x'])(
    'refuses the escape %s',
    async (requested) => {
      const { ws } = await setup();
      expect((await refusal(resolveInWorkspace(ws, requested, { tool: 'read_file' }))).code).toBe(
        'path_outside_workspace',
      );
    },
  );

  it('refuses an absolute path, even one inside the workspace', async () => {
    const { ws } = await setup();
    for (const requested of ['/etc/passwd', path.join(ws, 'src', 'app.ts')]) {
      const error = await refusal(resolveInWorkspace(ws, requested, { tool: 'read_file' }));
      expect(error.code).toBe('path_outside_workspace');
      expect(error.message).toContain('is absolute; give a path relative to the workspace');
    }
  });

  it('refuses backslash forms of escapes and absolute paths', async () => {
    const { ws } = await setup();
    for (const requested of ['..\\..\\etc\\passwd', '\\etc\\passwd']) {
      expect((await refusal(resolveInWorkspace(ws, requested, { tool: 'read_file' }))).code).toBe(
        'path_outside_workspace',
      );
    }
  });

  it.each([
    ['%2e%2e/etc/passwd', 'is outside the workspace'],
    ['%2E%2E%2Fetc%2Fpasswd', 'is outside the workspace'],
    ['..%2fetc', 'is outside the workspace'],
    ['src/%2e%2e/%2e%2e/x', 'is outside the workspace'],
    ['%252e%252e/etc/passwd', 'is outside the workspace'],
    ['%2fetc%2fpasswd', 'is absolute'],
    ['src/app.ts%00.png', 'contains a NUL byte'],
  ])('decodes and refuses %s', async (requested, why) => {
    const { ws } = await setup();
    const error = await refusal(resolveInWorkspace(ws, requested, { tool: 'read_file' }));
    expect(error.code).toBe('path_outside_workspace');
    expect(error.message).toContain(why);
    expect(error.message).toContain('percent-decoded');
  });

  it('refuses a NUL byte, showing it escaped', async () => {
    const { ws } = await setup();
    const error = await refusal(resolveInWorkspace(ws, 'src/app.ts\0.png', { tool: 'read_file' }));
    expect(error.code).toBe('path_outside_workspace');
    expect(error.message).toBe('read_file refused: path "src/app.ts\\u0000.png" contains a NUL byte');
  });

  it('refuses a sibling directory whose name starts with the workspace name', async () => {
    const { ws } = await setup();
    const error = await refusal(resolveInWorkspace(ws, '../ws-evil/secret.txt', { tool: 'read_file' }));
    expect(error.code).toBe('path_outside_workspace');
  });

  it('refuses a symlink into a sibling whose name starts with the workspace name', async () => {
    const { ws, evil } = await setup();
    await symlink(evil, path.join(ws, 'shared'));
    const error = await refusal(resolveInWorkspace(ws, 'shared/secret.txt', { tool: 'read_file' }));
    expect(error.code).toBe('path_outside_workspace');
    expect(error.message).toBe(
      `read_file refused: path shared/secret.txt leads outside the workspace ${ws} through a symlink`,
    );
  });

  it('refuses a symlinked file that points out', async () => {
    const { ws, evil } = await setup();
    await symlink(path.join(evil, 'secret.txt'), path.join(ws, 'notes.txt'));
    expect((await refusal(resolveInWorkspace(ws, 'notes.txt', { tool: 'read_file' }))).code).toBe(
      'path_outside_workspace',
    );
  });

  it('refuses a not-yet-existing path below a symlinked directory that points out', async () => {
    const { ws, evil } = await setup();
    await symlink(evil, path.join(ws, 'out'));
    expect((await refusal(resolveInWorkspace(ws, 'out/new/file.txt', { tool: 'write_file' }))).code).toBe(
      'path_outside_workspace',
    );
  });

  it('refuses a relative symlink that climbs out', async () => {
    const { ws } = await setup();
    await symlink('../ws-evil', path.join(ws, 'src', 'up'));
    expect((await refusal(resolveInWorkspace(ws, 'src/up/secret.txt', { tool: 'read_file' }))).code).toBe(
      'path_outside_workspace',
    );
  });

  it('applies .. before symlinks, so the returned path never climbs through one', async () => {
    const { ws } = await setup();
    await symlink('../ws-evil', path.join(ws, 'src', 'up'));
    await expect(resolveInWorkspace(ws, 'src/up/../app.ts', { tool: 'read_file' })).resolves.toBe(
      path.join(ws, 'src', 'app.ts'),
    );
  });

  it('refuses a dangling symlink, whose target could be created outside', async () => {
    const { ws, evil } = await setup();
    await symlink(path.join(evil, 'planted.txt'), path.join(ws, 'dangling'));
    const error = await refusal(resolveInWorkspace(ws, 'dangling', { tool: 'write_file' }));
    expect(error.code).toBe('path_outside_workspace');
    expect(error.message).toContain('symlink whose target does not exist');
  });
});

describe('locateInWorkspace', () => {
  it('says what its walk found: the path, and whether it and its parent exist', async () => {
    const { ws } = await setup();
    const locate = (requested: string) => locateInWorkspace(ws, requested, { tool: 'write_file' });

    await expect(locate('src/app.ts')).resolves.toEqual({
      path: path.join(ws, 'src', 'app.ts'),
      exists: true,
      parentExists: true,
    });
    await expect(locate('src/new.ts')).resolves.toEqual({
      path: path.join(ws, 'src', 'new.ts'),
      exists: false,
      parentExists: true,
    });
    await expect(locate('new.txt')).resolves.toEqual({
      path: path.join(ws, 'new.txt'),
      exists: false,
      parentExists: true,
    });
    await expect(locate('a/b/c.txt')).resolves.toEqual({
      path: path.join(ws, 'a', 'b', 'c.txt'),
      exists: false,
      parentExists: false,
    });
    await expect(locate('.')).resolves.toEqual({ path: ws, exists: true, parentExists: true });
  });

  it('finds the parent through a symlink inside the workspace', async () => {
    const { ws } = await setup();
    await symlink(path.join(ws, 'src'), path.join(ws, 'link'));

    await expect(locateInWorkspace(ws, 'link/new.ts', { tool: 'write_file' })).resolves.toEqual({
      path: path.join(ws, 'src', 'new.ts'),
      exists: false,
      parentExists: true,
    });
  });
});
