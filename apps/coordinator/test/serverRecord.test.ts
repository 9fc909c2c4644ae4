import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { claimHome, HomeBusyError } from '../src/serverRecord.ts';

const root = join(import.meta.dirname, '..', '..', '..');
const serverRecord = join(import.meta.dirname, '..', 'src', 'serverRecord.ts');

/** A process that tries to claim the home when told to go, says how it went, and holds a claim for a moment. */
const CLAIMER = `
import { claimHome } from ${JSON.stringify(serverRecord)};
const home = process.argv[1];
process.stdin.once('data', async (data) => {
  // Every claimer starts at the same moment, to the millisecond: told when, each waits for it on a busy loop.
  const at = Number(String(data).trim());
  while (Date.now() < at) {}
  try {
    const claim = await claimHome(home);
    console.log('claimed');
    setTimeout(() => claim.release(), 1500);
  } catch (error) {
    console.log(error.name === 'HomeBusyError' ? 'busy' : 'error ' + error.message);
  }
});
console.log('ready');
`;

function claimer(home: string) {
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', CLAIMER, home], {
    cwd: root,
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  let out = '';
  const ready = new Promise<void>((resolve) => {
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('ready')) resolve();
    });
  });
  const done = new Promise<string>((resolve) =>
    child.on('exit', () => resolve(out.replace('ready\n', '').trim())),
  );
  return { ready, go: (at: number) => child.stdin.end(`${at}\n`), done };
}

describe('claimHome', () => {
  let home: string;
  afterEach(async () => {
    await rm(home, { recursive: true, force: true });
  });

  it('lets exactly one of several processes that try at the same moment claim a home', async () => {
    for (let round = 0; round < 5; round++) {
      home = await mkdtemp(join(tmpdir(), 'troupe-claim-'));
      const claimers = Array.from({ length: 4 }, () => claimer(home));
      await Promise.all(claimers.map((c) => c.ready));
      const at = Date.now() + 300;
      for (const c of claimers) c.go(at);
      const outcomes = (await Promise.all(claimers.map((c) => c.done))).sort();
      expect(outcomes, `round ${round}`).toEqual(['busy', 'busy', 'busy', 'claimed']);
      await rm(home, { recursive: true, force: true });
    }
  }, 60_000);

  it('takes over the lock of a troupe up that died, and refuses while the holder lives', async () => {
    home = await mkdtemp(join(tmpdir(), 'troupe-claim-'));
    // A pid that is not running: the lock of a `troupe up` killed with -9.
    await writeFile(join(home, 'up.lock'), `${JSON.stringify({ pid: 2 ** 22 + 12345 })}\n`);
    const claim = await claimHome(home);
    expect(JSON.parse(await readFile(join(home, 'up.lock'), 'utf8'))).toEqual({ pid: process.pid });
    await claim.started(4242);
    expect(JSON.parse(await readFile(join(home, 'up.lock'), 'utf8'))).toEqual({
      pid: process.pid,
      natsPid: 4242,
    });
    await claim.release();
    await expect(readFile(join(home, 'up.lock'), 'utf8')).rejects.toThrow();

    const holder = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 30000)']);
    try {
      await writeFile(join(home, 'up.lock'), `${JSON.stringify({ pid: holder.pid })}\n`);
      await expect(claimHome(home)).rejects.toBeInstanceOf(HomeBusyError);
    } finally {
      holder.kill('SIGKILL');
    }
  });
});
