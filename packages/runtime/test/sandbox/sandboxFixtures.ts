import { readFileSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import net from 'node:net';
import { afterEach } from 'vitest';

/** Whether a process is running; a killed process its parent has not reaped yet still answers kill(pid, 0), so zombies count as gone. */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

/** Host pids of live processes whose command line contains `marker`; works for processes inside a pid namespace too. */
export async function pidsWithArgument(marker: string): Promise<number[]> {
  const pids: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const cmdline = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    if (cmdline.split('\0').includes(marker) && isAlive(Number(entry))) pids.push(Number(entry));
  }
  return pids.sort((a, b) => a - b);
}

/** A TCP server on 127.0.0.1 that accepts and closes connections, stopped after the current test. */
export function useTcpServer(): () => Promise<number> {
  const servers: net.Server[] = [];
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((server) => new Promise((done) => server.close(done))));
  });
  return () =>
    new Promise((resolve) => {
      const server = net.createServer((socket) => socket.end());
      servers.push(server);
      server.listen(0, '127.0.0.1', () => resolve((server.address() as net.AddressInfo).port));
    });
}
