import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, readFile, realpath, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { ValueRef } from '@troupe/protocol';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ValueStoreError, WorkspaceLimitError, WorkspaceSync } from '../../src/index.ts';
import { readRegularFile } from '../../src/workspace/workspaceScan.ts';

/** The two calls the sync makes of a value store, in memory, checking digests as the real one does. */
class MemoryValues {
  readonly objects = new Map<string, Buffer>();
  writes = 0;
  async storeBytes(pipeline: string, name: string, bytes: Uint8Array): Promise<ValueRef> {
    this.writes += 1;
    const whole = Buffer.from(bytes);
    this.objects.set(name, whole);
    const sha256 = createHash('sha256').update(whole).digest('hex');
    return { bucket: `troupe-values-${pipeline}`, name, bytes: whole.length, sha256 };
  }
  async readBytes(ref: ValueRef): Promise<Buffer> {
    const found = this.objects.get(ref.name);
    if (!found) throw new ValueStoreError('value_missing', `value ${ref.name} is not stored`);
    return found;
  }
}

let roots: string[];
let values: MemoryValues;
beforeEach(async () => {
  roots = [await mkdtemp(path.join(tmpdir(), 'ws-a-')), await mkdtemp(path.join(tmpdir(), 'ws-b-'))];
  values = new MemoryValues();
});
afterEach(async () => {
  await Promise.all(roots.map((root) => rm(root, { recursive: true, force: true })));
});

const host = (i: number, limits?: ConstructorParameters<typeof WorkspaceSync>[0]['limits']) =>
  new WorkspaceSync({ values, workspaceRoot: roots[i] as string, ...(limits ? { limits } : {}) });
const ws = (i: number) => path.join(roots[i] as string, 'demo', 'task-1');

describe('WorkspaceSync', () => {
  it("hands a step's files to another host whole, and only what changed", async () => {
    const a = host(0);
    await a.pull('demo', 'task-1', undefined);
    await mkdir(path.join(ws(0), 'src'), { recursive: true });
    const big = Buffer.alloc(3 * 1024 * 1024, 7);
    await writeFile(path.join(ws(0), 'src', 'big.bin'), big);
    await writeFile(path.join(ws(0), 'notes.md'), 'plan');
    const first = await a.push('demo', 'task-1', undefined);
    expect(Object.keys(first?.files ?? {}).sort()).toEqual(['notes.md', 'src/big.bin']);
    expect(values.writes).toBe(2);

    const b = host(1);
    await b.pull('demo', 'task-1', first?.files);
    expect((await readFile(path.join(ws(1), 'src', 'big.bin'))).equals(big)).toBe(true);
    expect(await readFile(path.join(ws(1), 'notes.md'), 'utf8')).toBe('plan');

    // The reviewer changes one file and removes the other: only those are its changes.
    await writeFile(path.join(ws(1), 'notes.md'), 'reviewed');
    await rm(path.join(ws(1), 'src', 'big.bin'));
    const second = await b.push('demo', 'task-1', first?.files);
    expect(Object.keys(second?.files ?? {})).toEqual(['notes.md']);
    expect(second?.removed).toEqual(['src/big.bin']);
    expect(values.writes).toBe(3);
  });

  it('removes on pull only files an earlier manifest brought and nobody changed since', async () => {
    const a = host(0);
    await mkdir(ws(0), { recursive: true });
    await writeFile(path.join(ws(0), 'old.txt'), 'old');
    await writeFile(path.join(ws(0), 'kept.txt'), 'kept');
    const made = await a.push('demo', 'task-1', undefined);
    const manifest = made?.files ?? {};
    // The next step comes with the manifest that carries them: the workflow has them.
    await a.pull('demo', 'task-1', manifest);
    // Someone edits kept.txt here, and leaves a file of their own.
    await writeFile(path.join(ws(0), 'kept.txt'), 'my own edit');
    await writeFile(path.join(ws(0), 'mine.txt'), 'unrelated');
    // A request without a manifest (a workflow from before manifests) removes nothing.
    await a.pull('demo', 'task-1', undefined);
    expect(await readFile(path.join(ws(0), 'old.txt'), 'utf8')).toBe('old');
    // A later step elsewhere removed both files the manifest had.
    await a.pull('demo', 'task-1', {});
    await expect(readFile(path.join(ws(0), 'old.txt'))).rejects.toMatchObject({ code: 'ENOENT' });
    expect(await readFile(path.join(ws(0), 'kept.txt'), 'utf8')).toBe('my own edit');
    expect(await readFile(path.join(ws(0), 'mine.txt'), 'utf8')).toBe('unrelated');
    expect(Object.keys(manifest).sort()).toEqual(['kept.txt', 'old.txt']);
  });

  it('keeps what a step changed here until a manifest carries it back: a step sent again or a sibling does not undo it', async () => {
    const a = host(0);
    await mkdir(ws(0), { recursive: true });
    await writeFile(path.join(ws(0), 'plan.md'), 'plan');
    await writeFile(path.join(ws(0), 'old.md'), 'old');
    const before = (await a.push('demo', 'task-1', undefined))?.files ?? {};
    await a.pull('demo', 'task-1', before);
    // The coder writes, edits and removes; its host is stopped and hands on, but the workflow never takes the reply.
    await writeFile(path.join(ws(0), 'src.ts'), 'code');
    await writeFile(path.join(ws(0), 'plan.md'), 'plan, edited');
    await rm(path.join(ws(0), 'old.md'));
    await a.push('demo', 'task-1', before);
    // After the restart the step comes again with the manifest from before it: its journal will not redo the calls.
    await a.pull('demo', 'task-1', before);
    expect(await readFile(path.join(ws(0), 'src.ts'), 'utf8')).toBe('code');
    expect(await readFile(path.join(ws(0), 'plan.md'), 'utf8')).toBe('plan, edited');
    await expect(readFile(path.join(ws(0), 'old.md'))).rejects.toMatchObject({ code: 'ENOENT' });
    // Again, as a sibling step that started before the workflow took the coder's reply would come: still kept.
    await a.pull('demo', 'task-1', before);
    expect(await readFile(path.join(ws(0), 'src.ts'), 'utf8')).toBe('code');
    // Once a manifest carries the changes back, a later change elsewhere comes through again.
    const after = {
      ...before,
      'src.ts': { bytes: 4, sha256: createHash('sha256').update('code').digest('hex') },
    };
    await a.pull('demo', 'task-1', after);
    const elsewhere = (await host(1).push('demo', 'task-1', after)) ?? { files: {}, removed: [] };
    expect(elsewhere.files).toEqual({});
    await mkdir(ws(1), { recursive: true });
    await writeFile(path.join(ws(1), 'src.ts'), 'code, reviewed');
    const reviewed = (await host(1).push('demo', 'task-1', {}))?.files ?? {};
    await a.pull('demo', 'task-1', { ...after, ...reviewed });
    expect(await readFile(path.join(ws(0), 'src.ts'), 'utf8')).toBe('code, reviewed');
  });

  it('does not revert a file a step still at work here changed since this host last handed it on', async () => {
    const a = host(0);
    await mkdir(ws(0), { recursive: true });
    await writeFile(path.join(ws(0), 'shared.md'), 'v1');
    const manifest = (await a.push('demo', 'task-1', undefined))?.files ?? {};
    await a.pull('demo', 'task-1', manifest);
    // A parallel branch's step, running here, edits the file; the other branch's next step starts meanwhile.
    await writeFile(path.join(ws(0), 'shared.md'), 'the other branch at work');
    await a.pull('demo', 'task-1', manifest);
    expect(await readFile(path.join(ws(0), 'shared.md'), 'utf8')).toBe('the other branch at work');
  });

  it('hands on as gone a file removed while it was being stored, rather than failing the step', async () => {
    await mkdir(ws(0), { recursive: true });
    await writeFile(path.join(ws(0), 'a.txt'), 'kept');
    await writeFile(path.join(ws(0), 'b.tmp'), 'a build’s temporary file');
    // A process still at work in the workspace removes b.tmp just after the scan, while a.txt is being stored.
    const storeBytes = values.storeBytes.bind(values);
    values.storeBytes = async (pipeline, name, bytes) => {
      await rm(path.join(ws(0), 'b.tmp'), { force: true });
      return storeBytes(pipeline, name, bytes);
    };
    const pushed = await host(0).push('demo', 'task-1', undefined);
    expect(Object.keys(pushed?.files ?? {})).toEqual(['a.txt']);
    expect(pushed?.removed).toEqual([]);
  });

  it('replaces a local file whose content differs from the manifest, and fails when a file is gone', async () => {
    await mkdir(ws(0), { recursive: true });
    await writeFile(path.join(ws(0), 'a.txt'), 'from the executor');
    const made = await host(0).push('demo', 'task-1', undefined);
    await mkdir(ws(1), { recursive: true });
    await writeFile(path.join(ws(1), 'a.txt'), 'stale');
    await host(1).pull('demo', 'task-1', made?.files);
    expect(await readFile(path.join(ws(1), 'a.txt'), 'utf8')).toBe('from the executor');

    // A host new to a task whose file the store no longer has (its retention passed).
    values.objects.clear();
    await expect(host(1).pull('demo', 'task-2', made?.files)).rejects.toSatisfy((e) =>
      ValueStoreError.is(e, 'value_missing'),
    );
  });

  it('reads no file that a directory swapped for a symlink leads out of the workspace to', async () => {
    const outside = path.join(roots[1] as string, 'private');
    await mkdir(outside, { recursive: true });
    await writeFile(path.join(outside, 'id_rsa'), 'secret');
    await mkdir(ws(0), { recursive: true });
    // As a step at work could leave it between the scan's check of a directory and the read of a file in it.
    await symlink(outside, path.join(ws(0), 'keys'));
    const realWorkspace = await realpath(ws(0));
    expect(await readRegularFile(path.join(ws(0), 'keys', 'id_rsa'), realWorkspace)).toBeUndefined();
    expect((await readRegularFile(path.join(ws(0), 'keys', 'id_rsa')))?.toString()).toBe('secret');
  });

  it('never follows a symlink: neither one the step made, nor one in the way of a pull', async () => {
    const outside = path.join(roots[1] as string, 'secret.txt');
    await writeFile(outside, 'secret');
    await mkdir(ws(0), { recursive: true });
    await symlink(outside, path.join(ws(0), 'link.txt'));
    await writeFile(path.join(ws(0), 'real.txt'), 'real');
    const made = await host(0).push('demo', 'task-1', undefined);
    expect(Object.keys(made?.files ?? {})).toEqual(['real.txt']);

    // A directory of the workspace that is a link out of it is refused, not written through.
    await mkdir(ws(1), { recursive: true });
    await symlink(roots[0] as string, path.join(ws(1), 'out'));
    const real = { bytes: 4, sha256: createHash('sha256').update('real').digest('hex') };
    expect(made?.files['real.txt']).toEqual(real);
    await expect(host(1).pull('demo', 'task-1', { 'out/x.txt': real })).rejects.toThrow(/outside|refused/);
  });

  it('passes over installed dependencies, caches and version control, which count against no limit', async () => {
    await mkdir(path.join(ws(0), 'node_modules', 'left-pad'), { recursive: true });
    await mkdir(path.join(ws(0), '.git', 'objects'), { recursive: true });
    await mkdir(path.join(ws(0), 'src'), { recursive: true });
    for (let i = 0; i < 5; i++) {
      await writeFile(path.join(ws(0), 'node_modules', 'left-pad', `f${i}.js`), `module ${i}`);
      await writeFile(path.join(ws(0), '.git', 'objects', `o${i}`), `object ${i}`);
    }
    await writeFile(path.join(ws(0), 'src', 'index.js'), 'mine');
    const pushed = await host(0, { maxFileBytes: 1_000, maxTaskBytes: 10_000, maxFiles: 2 }).push(
      'demo',
      'task-1',
      undefined,
    );
    expect(Object.keys(pushed?.files ?? {})).toEqual(['src/index.js']);
  });

  it('fails past a limit, naming the file or the total, rather than handing on part', async () => {
    await mkdir(ws(0), { recursive: true });
    await writeFile(path.join(ws(0), 'a.bin'), Buffer.alloc(600));
    await writeFile(path.join(ws(0), 'b.bin'), Buffer.alloc(600));
    const perFile = host(0, { maxFileBytes: 500, maxTaskBytes: 10_000, maxFiles: 10 });
    await expect(perFile.push('demo', 'task-1', undefined)).rejects.toThrow(
      /workspace file a\.bin is 600 bytes, over the 500-byte limit/,
    );
    const perTask = host(0, { maxFileBytes: 1_000, maxTaskBytes: 1_000, maxFiles: 10 });
    await expect(perTask.push('demo', 'task-1', undefined)).rejects.toBeInstanceOf(WorkspaceLimitError);
    const files = host(0, { maxFileBytes: 1_000, maxTaskBytes: 10_000, maxFiles: 1 });
    await expect(files.push('demo', 'task-1', undefined)).rejects.toThrow(/more than 1 files/);
    expect(values.writes).toBe(0);
  });
});
