import { readFileSync } from 'node:fs';
import { link, mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join, sep } from 'node:path';
import { HomeLock, ServerRecord } from '@troupe/protocol';

const recordFile = (home: string) => join(home, 'server.json');
const lockFile = (home: string) => join(home, 'up.lock');

export async function writeServerRecord(home: string, record: ServerRecord): Promise<void> {
  await mkdir(home, { recursive: true });
  await writeFile(recordFile(home), `${JSON.stringify(record, null, 2)}\n`);
}

/** The recorded server, if the `troupe up` that started it is still alive. */
export async function readServerRecord(home: string): Promise<ServerRecord | undefined> {
  const record = await recordIn(home);
  return record !== undefined && alive(record.pid) ? record : undefined;
}

export async function removeServerRecord(home: string, pid: number): Promise<void> {
  const record = await recordIn(home);
  if (record === undefined || record.pid === pid) await rm(recordFile(home), { force: true });
}

/** Another `troupe up` holds this home: its pid, and its server's URL when it has recorded one. */
export class HomeBusyError extends Error {
  override readonly name = 'HomeBusyError';
  readonly code = 'home_busy';
  readonly pid: number;
  readonly url: string | undefined;

  constructor(home: string, pid: number, url: string | undefined) {
    super(`troupe up is already running on ${home} (pid ${pid}${url ? `, ${url}` : ''})`);
    this.pid = pid;
    this.url = url;
  }
}

/** This process's hold on a home (see {@link claimHome}). */
export interface HomeClaim {
  /** Notes the nats-server started for the home, so a `troupe up` after a kill -9 of this one can stop it. */
  started(natsPid: number): Promise<void>;
  release(): Promise<void>;
}

/**
 * Makes this process the one `troupe up` of a home, so two never start servers on one store. The lock file is
 * written whole under a name of its own and then linked into place, which fails if a lock is there: so whoever
 * reads it reads it whole, and of two processes only one links. A lock left by a `troupe up` that died (kill -9)
 * is moved aside by one process (a rename only one can win), which stops the nats-server that outlived it and
 * then takes the home. Fails with {@link HomeBusyError} while the holder lives.
 */
export async function claimHome(home: string): Promise<HomeClaim> {
  await mkdir(home, { recursive: true });
  const path = lockFile(home);
  const mine = `${path}.${process.pid}`;
  for (let attempt = 0; ; attempt++) {
    if (attempt === 10) throw new Error(`cannot take the lock ${path}: it keeps changing`);
    await writeLock(mine, { pid: process.pid });
    try {
      await link(mine, path);
      await rm(mine, { force: true });
      break;
    } catch (error) {
      await rm(mine, { force: true });
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    const holder = await lockIn(home);
    if (holder !== undefined && holder.pid !== process.pid && alive(holder.pid)) {
      throw new HomeBusyError(home, holder.pid, (await recordIn(home))?.url);
    }
    // Dead (or unreadable, which a whole-written lock never is): move it aside; only one process can.
    const aside = `${path}.stale.${process.pid}`;
    try {
      await rename(path, aside);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') continue;
      throw error;
    }
    const stale = await readLock(aside);
    if (stale !== undefined && stale.pid !== process.pid && alive(stale.pid)) {
      // Another process took the home between the read and the rename: give its lock back (unless yet another
      // has linked one in meanwhile), then say whose the home is.
      await link(aside, path).catch(() => undefined);
      await rm(aside, { force: true });
      throw new HomeBusyError(home, stale.pid, (await recordIn(home))?.url);
    }
    await rm(aside, { force: true });
    await stopOrphanedServer(home, stale?.natsPid ?? (await recordIn(home))?.natsPid);
  }
  const ours = async () => (await lockIn(home))?.pid === process.pid;
  return {
    async started(natsPid) {
      if (!(await ours())) return;
      // Written aside and renamed over the lock: a reader sees the old lock or the new, whole.
      await writeLock(mine, { pid: process.pid, natsPid });
      await rename(mine, path);
    },
    async release() {
      if (await ours()) await rm(path, { force: true });
    },
  };
}

async function writeLock(path: string, lock: HomeLock): Promise<void> {
  await writeFile(path, `${JSON.stringify(lock)}\n`);
}

async function readLock(path: string): Promise<HomeLock | undefined> {
  try {
    return HomeLock.parse(JSON.parse(await readFile(path, 'utf8')));
  } catch {
    return undefined;
  }
}

function lockIn(home: string): Promise<HomeLock | undefined> {
  return readLock(lockFile(home));
}

/**
 * Stops the nats-server a dead `troupe up` left running on this home, if there is one: SIGTERM, then SIGKILL. Only
 * a process that is a nats-server using this home's store is touched, in case its pid was reused since.
 */
async function stopOrphanedServer(home: string, pid: number | undefined): Promise<void> {
  if (pid === undefined || !alive(pid) || !servesStoreOf(pid, home)) return;
  process.kill(pid, 'SIGTERM');
  const deadline = Date.now() + 5_000;
  while (alive(pid) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
  if (alive(pid)) process.kill(pid, 'SIGKILL');
  // A killed process that nobody reaps stays a zombie, alive to kill(0) but harmless: wait a moment, no longer.
  const killed = Date.now() + 2_000;
  while (alive(pid) && Date.now() < killed) await new Promise((resolve) => setTimeout(resolve, 20));
  await rm(recordFile(home), { force: true });
}

/** Whether the process is a nats-server whose store is under this home (Linux: its command line). */
function servesStoreOf(pid: number, home: string): boolean {
  try {
    const words = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    return (
      words.some((word) => word.includes('nats-server')) &&
      words.some((word) => word.startsWith(`${home}${sep}`))
    );
  } catch {
    // No /proc (macOS): trust the record, which only this home's `troupe up` writes.
    return process.platform !== 'linux';
  }
}

async function recordIn(home: string): Promise<ServerRecord | undefined> {
  try {
    return ServerRecord.parse(JSON.parse(await readFile(recordFile(home), 'utf8')));
  } catch {
    return undefined;
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists, under another user.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
