import { chmod, readdir, readFile, realpath, stat, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { editFileTool } from '../../src/tools/fileTools.ts';
import { useTempDirs } from './tempDirs.ts';
import { call, failure } from './toolHarness.ts';

const tempDir = useTempDirs();

async function workspaceWith(files: Record<string, string>): Promise<string> {
  const ws = await realpath(await tempDir());
  for (const [name, content] of Object.entries(files)) await writeFile(path.join(ws, name), content);
  return ws;
}

describe('edit_file', () => {
  it('replaces a unique occurrence, keeping the mode and leaving no temp file', async () => {
    const ws = await workspaceWith({ 'a.ts': 'const a = 1;\nconst b = 2;\n' });
    await chmod(path.join(ws, 'a.ts'), 0o640);
    await expect(
      call(editFileTool, ws, { path: 'a.ts', old: 'const b = 2;', new: 'const b = 3;' }),
    ).resolves.toBe('replaced 1 occurrence(s) in a.ts');
    await expect(readFile(path.join(ws, 'a.ts'), 'utf8')).resolves.toBe('const a = 1;\nconst b = 3;\n');
    expect((await stat(path.join(ws, 'a.ts'))).mode & 0o777).toBe(0o640);
    await expect(readdir(ws)).resolves.toEqual(['a.ts']);
  });

  it('takes $ sequences in the new text literally', async () => {
    const ws = await workspaceWith({ 'a.txt': 'price: X' });
    await call(editFileTool, ws, { path: 'a.txt', old: 'X', new: "$& $' $1 $$" });
    await expect(readFile(path.join(ws, 'a.txt'), 'utf8')).resolves.toBe("price: $& $' $1 $$");
  });

  it('refuses several occurrences without replaceAll, saying how many, and changes nothing', async () => {
    const ws = await workspaceWith({ 'a.txt': 'x = 1\nx = 1\nx = 1\n' });
    const error = await failure(call(editFileTool, ws, { path: 'a.txt', old: 'x = 1', new: 'x = 2' }));
    expect(error.code).toBe('invalid_arguments');
    expect(error.message).toBe(
      'edit_file: the text in old occurs 3 times in a.txt; add surrounding lines so it occurs once, or set replaceAll to replace all 3',
    );
    await expect(readFile(path.join(ws, 'a.txt'), 'utf8')).resolves.toBe('x = 1\nx = 1\nx = 1\n');
  });

  it('replaces every occurrence with replaceAll', async () => {
    const ws = await workspaceWith({ 'a.txt': 'x = 1\nx = 1\nx = 1\n' });
    await expect(
      call(editFileTool, ws, { path: 'a.txt', old: 'x = 1', new: 'x = 2', replaceAll: true }),
    ).resolves.toBe('replaced 3 occurrence(s) in a.txt');
    await expect(readFile(path.join(ws, 'a.txt'), 'utf8')).resolves.toBe('x = 2\nx = 2\nx = 2\n');
  });

  it('says when the text is missing without showing the file', async () => {
    const ws = await workspaceWith({ '.env': 'OPENAI_API_KEY=sk-very-secret\n' });
    const error = await failure(call(editFileTool, ws, { path: '.env', old: 'API_KEY=sk-other', new: 'x' }));
    expect(error.code).toBe('invalid_arguments');
    expect(error.message).toBe(
      'edit_file: the text in old was not found in .env; read the file again and copy the exact text, including whitespace',
    );
    expect(error.message).not.toContain('sk-very-secret');
  });

  it('refuses a path outside the workspace, through .. or a symlink', async () => {
    const outside = await realpath(await tempDir());
    await writeFile(path.join(outside, 'b.txt'), 'keep');
    const ws = await workspaceWith({});
    await symlink(outside, path.join(ws, 'out'));
    const dotted = path.relative(ws, path.join(outside, 'b.txt'));
    for (const requested of [dotted, 'out/b.txt', path.join(outside, 'b.txt')]) {
      const error = await failure(call(editFileTool, ws, { path: requested, old: 'keep', new: 'lost' }));
      expect(error.code).toBe('path_outside_workspace');
    }
    await expect(readFile(path.join(outside, 'b.txt'), 'utf8')).resolves.toBe('keep');
  });

  it('refuses a missing file, a directory and a no-op edit', async () => {
    const ws = await workspaceWith({ 'a.txt': 'a' });
    expect((await failure(call(editFileTool, ws, { path: 'nope.txt', old: 'a', new: 'b' }))).code).toBe(
      'not_found',
    );
    expect((await failure(call(editFileTool, ws, { path: '.', old: 'a', new: 'b' }))).message).toBe(
      'edit_file: . is a directory, not a file',
    );
    expect((await failure(call(editFileTool, ws, { path: 'a.txt', old: 'a', new: 'a' }))).message).toBe(
      'edit_file: old and new are the same text; nothing to change',
    );
  });

  it('refuses a file that is not UTF-8 text, leaving it untouched', async () => {
    const ws = await workspaceWith({});
    const bytes = Buffer.from([0x61, 0xff, 0xfe, 0x62]);
    await writeFile(path.join(ws, 'blob.bin'), bytes);
    const error = await failure(call(editFileTool, ws, { path: 'blob.bin', old: 'a', new: 'c' }));
    expect(error.message).toBe(
      'edit_file refused: blob.bin is not UTF-8 text, and editing it as text would corrupt it',
    );
    await expect(readFile(path.join(ws, 'blob.bin'))).resolves.toEqual(bytes);
  });

  it('rejects an empty old text in its schema', () => {
    expect(editFileTool.input.safeParse({ path: 'a', old: '', new: 'b' }).success).toBe(false);
  });
});
