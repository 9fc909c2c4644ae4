import { mkdir, realpath, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { searchFilesTool } from '../../src/tools/fileTools.ts';
import { useTempDirs } from './tempDirs.ts';
import { call, failure } from './toolHarness.ts';

const tempDir = useTempDirs();

async function workspaceWith(files: Record<string, string | Buffer>): Promise<string> {
  const ws = await realpath(await tempDir());
  for (const [name, content] of Object.entries(files)) {
    await mkdir(path.dirname(path.join(ws, name)), { recursive: true });
    await writeFile(path.join(ws, name), content);
  }
  return ws;
}

describe('search_files', () => {
  it('returns path:line: text for regex hits, in tree order', async () => {
    const ws = await workspaceWith({
      'src/a.ts': 'import x from "y";\nexport function alpha() {}\n',
      'src/deep/b.ts': 'const z = 1;\r\nexport function beta() {}\r\n',
      'README.md': 'export function documented()\n',
    });
    await expect(call(searchFilesTool, ws, { pattern: 'export function (\\w+)' })).resolves.toBe(
      [
        'README.md:1: export function documented()',
        'src/a.ts:2: export function alpha() {}',
        'src/deep/b.ts:2: export function beta() {}',
      ].join('\n'),
    );
  });

  it('filters by a glob relative to the searched directory, or by file name', async () => {
    const ws = await workspaceWith({
      'src/a.ts': 'needle\n',
      'src/a.js': 'needle\n',
      'src/deep/b.ts': 'needle\n',
      'docs/c.ts': 'needle\n',
    });
    await expect(call(searchFilesTool, ws, { pattern: 'needle', glob: '**/*.ts' })).resolves.toBe(
      'docs/c.ts:1: needle\nsrc/a.ts:1: needle\nsrc/deep/b.ts:1: needle',
    );
    await expect(
      call(searchFilesTool, ws, { pattern: 'needle', path: 'src', glob: 'deep/*.ts' }),
    ).resolves.toBe('src/deep/b.ts:1: needle');
    await expect(call(searchFilesTool, ws, { pattern: 'needle', path: 'src', glob: '*.js' })).resolves.toBe(
      'src/a.js:1: needle',
    );
  });

  it('reports an invalid regex as invalid_arguments with the regex error', async () => {
    const ws = await workspaceWith({ 'a.txt': 'x' });
    const error = await failure(call(searchFilesTool, ws, { pattern: 'foo(' }));
    expect(error.code).toBe('invalid_arguments');
    expect(error.message).toBe(
      'search_files: pattern is not a valid regular expression: Invalid regular expression: /foo(/: Unterminated group',
    );
  });

  it('caps the hits with a marker, and does not mark an exact fit', async () => {
    const ws = await workspaceWith({
      'a.txt': Array.from({ length: 5 }, (_, i) => `hit ${i + 1}`).join('\n'),
    });
    const capped = await call(searchFilesTool, ws, { pattern: 'hit', maxResults: 3 });
    expect(capped.split('\n')).toEqual([
      'a.txt:1: hit 1',
      'a.txt:2: hit 2',
      'a.txt:3: hit 3',
      '…[capped at 3 matches; narrow the pattern, path or glob, or raise maxResults]',
    ]);
    const exact = await call(searchFilesTool, ws, { pattern: 'hit', maxResults: 5 });
    expect(exact.split('\n')).toHaveLength(5);
  });

  it('does not follow a symlinked directory or file out of the workspace', async () => {
    const outside = await realpath(await tempDir());
    await writeFile(path.join(outside, 'secret.txt'), 'needle outside\n');
    const ws = await workspaceWith({ 'in.txt': 'needle inside\n' });
    await symlink(outside, path.join(ws, 'linked-dir'));
    await symlink(path.join(outside, 'secret.txt'), path.join(ws, 'linked-file.txt'));
    await expect(call(searchFilesTool, ws, { pattern: 'needle' })).resolves.toBe('in.txt:1: needle inside');
    const error = await failure(call(searchFilesTool, ws, { pattern: 'needle', path: 'linked-dir' }));
    expect(error.code).toBe('path_outside_workspace');
  });

  it('skips binary files, files over 1 MiB, .git and node_modules', async () => {
    const ws = await workspaceWith({
      'bin.dat': Buffer.from('needle\0binary'),
      'big.txt': `needle\n${'x'.repeat(1024 * 1024)}`,
      '.git/config': 'needle\n',
      'node_modules/pkg/index.js': 'needle\n',
      'ok.txt': 'needle\n',
    });
    await expect(call(searchFilesTool, ws, { pattern: 'needle' })).resolves.toBe('ok.txt:1: needle');
    await expect(call(searchFilesTool, ws, { pattern: 'needle', path: 'node_modules' })).resolves.toBe(
      'node_modules/pkg/index.js:1: needle',
    );
  });

  it('searches a single file, and says when nothing matched', async () => {
    const ws = await workspaceWith({ 'a.txt': 'one\ntwo\n', 'b.txt': 'two\n' });
    await expect(call(searchFilesTool, ws, { pattern: '^t', path: 'a.txt' })).resolves.toBe('a.txt:2: two');
    await expect(call(searchFilesTool, ws, { pattern: 'three', glob: '*.txt' })).resolves.toBe(
      'no matches for /three/ in . matching *.txt',
    );
  });

  it('refuses a path outside the workspace and a missing one', async () => {
    const ws = await workspaceWith({});
    expect((await failure(call(searchFilesTool, ws, { pattern: 'x', path: '..' }))).code).toBe(
      'path_outside_workspace',
    );
    expect((await failure(call(searchFilesTool, ws, { pattern: 'x', path: 'nope' }))).code).toBe('not_found');
  });

  it('matches off the event loop: a pattern that backtracks catastrophically is stopped, not waited for', async () => {
    const ws = await workspaceWith({ 'slow.txt': `${'a'.repeat(40)}!\n` });
    const stop = new AbortController();
    setTimeout(() => stop.abort(), 300);
    let ticks = 0;
    const ticking = setInterval(() => ticks++, 20);
    const started = Date.now();
    const error = await failure(call(searchFilesTool, ws, { pattern: '^(a+)+$' }, { signal: stop.signal }));
    clearInterval(ticking);
    expect(error.code).toBe('cancelled');
    expect(Date.now() - started).toBeLessThan(5_000);
    // The event loop went on while the pattern ran: run inline, it would have blocked for minutes.
    expect(ticks).toBeGreaterThan(5);
  });
});
