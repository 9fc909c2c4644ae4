import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';

/** What `troupe up` leaves under its home directory so `submit` and `tail` find the server it started. */
export const ServerRecord = z.object({ url: z.string(), pid: z.number().int(), startedAt: z.string() });
export type ServerRecord = z.infer<typeof ServerRecord>;

const fileOf = (home: string) => join(home, 'server.json');

export async function writeServerRecord(home: string, record: ServerRecord): Promise<void> {
  await mkdir(home, { recursive: true });
  await writeFile(fileOf(home), `${JSON.stringify(record, null, 2)}\n`);
}

/** The recorded server, if its process is still alive. */
export async function readServerRecord(home: string): Promise<ServerRecord | undefined> {
  try {
    const record = ServerRecord.parse(JSON.parse(await readFile(fileOf(home), 'utf8')));
    process.kill(record.pid, 0);
    return record;
  } catch {
    return undefined;
  }
}

export async function removeServerRecord(home: string, pid: number): Promise<void> {
  const record = await readServerRecord(home);
  if (record === undefined || record.pid === pid) await rm(fileOf(home), { force: true });
}
