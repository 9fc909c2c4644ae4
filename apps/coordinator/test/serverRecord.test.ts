import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { claimHome, HomeBusyError } from '../src/serverRecord.ts';

const root = join(import.meta.dirname, '..', '..', '..');
const serverRecord = join(import.meta.dirname, '..', 'src', 'serverRecord.ts');

/**
 * A process that lives through every round. Told `<home> <at>`, it tries to claim that home at that moment and says
 * how it went; a claim it wins it holds until told `release` (so every other claimer meets a live holder).
 */
const CLAIMER = `
import { createInterface } from 'node:readline';
import { claimHome } from ${JSON.stringify(serverRecord)};
let held;
createInterface({ input: process.stdin }).on('line', async (line) => {
  if (line === 'release') {
    await held?.release();
    held = undefined;
    console.log('released');
    return;
  }
  // Every claimer starts at the same moment, to the millisecond: told when, each waits for it on a busy loop.
  const [home, at] = line.split(' ');
  while (Date.now() < Number(at)) {}
  try {
    held = await claimHome(home);
    console.log('claimed');
  } catch (error) {
    console.log(error.name === 'HomeBusyError' ? 'busy' : 'error ' + error.message);
  }
});
console.log('ready');
`;

function claimer() {
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', CLAIMER], {
    cwd: root,
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const said: string[] = [];
  let rest = '';
  child.stdout.on('data', (chunk: Buffer) => {
    const lines = (rest + chunk.toString()).split('\n');
    rest = lines.pop() ?? '';
    said.push(...lines);
  });
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  /** The next thing it says after what it has said so far. */
  const next = async () => {
    const before = said.length;
    await expect.poll(() => said.length, { timeout: 20_000 }).toBeGreaterThan(before);
    return said[before];
  };
  return {
    ready: expect.poll(() => said.includes('ready'), { timeout: 20_000 }).toBe(true),
    /** Tries to claim `home` at `at`; what it said of its claim. */
    claim: (home: string, at: number) => {
      const answer = next();
      child.stdin.write(`${home} ${at}\n`);
      return answer;
    },
    /** Lets go of a claim it holds. */
    release: () => {
      const answer = next();
      child.stdin.write('release\n');
      return answer;
    },
    end: () => {
      child.stdin.end();
      return exited;
    },
  };
}

describe('claimHome', () => {
  let home: string;
  afterEach(async () => {
    await rm(home, { recursive: true, force: true });
  });

  it('lets exactly one of several processes that try at the same moment claim a home', async () => {
    const claimers = Array.from({ length: 6 }, () => claimer());
    try {
      await Promise.all(claimers.map((c) => c.ready));
      for (let round = 0; round < 10; round++) {
        home = await mkdtemp(join(tmpdir(), 'troupe-claim-'));
        const at = Date.now() + 300;
        const outcomes = (await Promise.all(claimers.map((c) => c.claim(home, at)))).sort();
        expect(outcomes, `round ${round}`).toEqual([...Array(claimers.length - 1).fill('busy'), 'claimed']);
        await Promise.all(claimers.map((c) => c.release()));
        await rm(home, { recursive: true, force: true });
      }
    } finally {
      await Promise.all(claimers.map((c) => c.end()));
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

    // A process that lives until it is killed: the holder of a live lock.
    const holder = spawn(process.execPath, ['-e', 'process.stdin.resume()'], {
      stdio: ['pipe', 'ignore', 'ignore'],
    });
    try {
      await writeFile(join(home, 'up.lock'), `${JSON.stringify({ pid: holder.pid })}\n`);
      const busy = await claimHome(home).catch((error: unknown) => error);
      expect(busy).toBeInstanceOf(HomeBusyError);
      expect(busy).toMatchObject({ code: 'home_busy', pid: holder.pid });
    } finally {
      holder.kill('SIGKILL');
    }
  });
});
