import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { type FileWatch, watchFiles } from '../src/config/fileWatch.ts';

describe('watchFiles', () => {
  let root: string;
  let watch: FileWatch | undefined;

  beforeEach(async () => {
    root = await mkdtemp(join(tmpdir(), 'troupe-filewatch-'));
  });
  afterEach(async () => {
    watch?.close();
    await rm(root, { recursive: true, force: true });
  });

  it('says so when the directory of its files is removed, rather than going quiet', async () => {
    const directory = join(root, 'pipelines');
    await mkdir(directory);
    const file = join(directory, 'demo.yaml');
    await writeFile(file, 'one');
    const changed: string[][] = [];
    const errors: { message: string; directory: string }[] = [];
    watch = watchFiles([file], {
      onChange: (files) => changed.push(files),
      onError: (error, where) => errors.push({ message: error.message, directory: where }),
      debounceMs: 50,
    });
    await rm(directory, { recursive: true });
    await vi.waitFor(() => expect(errors).toHaveLength(1), { timeout: 5_000, interval: 20 });
    expect(errors[0]).toEqual({
      directory,
      message: `${directory} was removed; a directory made again in its place is not followed`,
    });
    // The file went with it: that is a change too, which the pipeline's reload reports as gone.
    await vi.waitFor(() => expect(changed).toEqual([[file]]), { timeout: 5_000, interval: 20 });
  });
});
