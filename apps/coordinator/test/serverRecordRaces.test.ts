import { mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { claimHome, HomeBusyError } from '../src/serverRecord.ts';

// The races of taking a dead holder's lock, played out by hand: another process acts at the moment the lock is
// moved aside. Every other file operation is the real one.
vi.mock('node:fs/promises', async (importOriginal) => {
  const actual = await importOriginal<typeof import('node:fs/promises')>();
  return { ...actual, rename: vi.fn(actual.rename) };
});
const realRename = (await vi.importActual<typeof import('node:fs/promises')>('node:fs/promises')).rename;

/** A pid nobody runs: the lock of a `troupe up` killed with -9. */
const DEAD = 2 ** 22 + 12345;
/** A pid that is always alive (init). */
const LIVE = 1;

describe('claimHome taking a dead holder’s lock', () => {
  let home: string;
  const lock = () => join(home, 'up.lock');
  const lockNow = async () => JSON.parse(await readFile(lock(), 'utf8'));

  beforeEach(async () => {
    home = await mkdtemp(join(tmpdir(), 'troupe-claim-race-'));
    await writeFile(lock(), `${JSON.stringify({ pid: DEAD })}\n`);
  });
  afterEach(async () => {
    vi.mocked(rename).mockReset();
    vi.mocked(rename).mockImplementation(realRename);
    await rm(home, { recursive: true, force: true });
  });

  it('gives back a live lock it moved aside, when another process took the home just before', async () => {
    vi.mocked(rename).mockImplementation(async (from, to) => {
      // Between reading the dead lock and moving it aside, another `troupe up` took the home.
      if (String(to).includes('.stale.')) await writeFile(lock(), `${JSON.stringify({ pid: LIVE })}\n`);
      return realRename(from, to);
    });
    const claim = claimHome(home);
    await expect(claim).rejects.toBeInstanceOf(HomeBusyError);
    await expect(claim).rejects.toMatchObject({ pid: LIVE });
    // The home is still that process's: its lock is back in place.
    expect(await lockNow()).toEqual({ pid: LIVE });
  });

  it('fails without a claim when the lock keeps being taken from under it', async () => {
    vi.mocked(rename).mockImplementation(async (from, to) => {
      // Each time, another process moved the dead lock aside first.
      if (String(to).includes('.stale.'))
        throw Object.assign(new Error(`ENOENT: no such file, rename '${String(from)}'`), { code: 'ENOENT' });
      return realRename(from, to);
    });
    await expect(claimHome(home)).rejects.toThrow(/cannot take the lock .*: it keeps changing/);
    expect(await lockNow()).toEqual({ pid: DEAD });
  });
});
