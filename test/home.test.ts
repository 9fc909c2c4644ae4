import { mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { type CliProcess, cliEnv, startTroupe, troupe } from './support/cli.ts';
import { examplePath } from './support/harness.ts';

/** nats-server processes running on a store under `dir`, by pid. */
async function serversUnder(dir: string): Promise<number[]> {
  const found: number[] = [];
  for (const pid of await readdir('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    if (cmdline.includes('nats-server') && cmdline.includes(dir)) found.push(Number(pid));
  }
  return found;
}

describe('one troupe up per home', () => {
  let project: string;
  const running: CliProcess[] = [];

  afterEach(async () => {
    for (const p of running.splice(0).reverse()) await p.stop('SIGTERM');
    await rm(project, { recursive: true, force: true });
  });

  it('refuses a second troupe up on a home, and lets it join with --join', async () => {
    project = await mkdtemp(join(tmpdir(), 'troupe-project-'));
    const first = startTroupe(['up', examplePath('demo.yaml')], cliEnv(), project);
    running.push(first);
    await first.waitFor(/troupe is up/);
    const record = JSON.parse(await readFile(join(project, '.troupe', 'server.json'), 'utf8'));

    const second = await troupe(['up', examplePath('demo.yaml')], cliEnv(), 30_000, project);
    expect(second.code).toBe(1);
    expect(second.stderr).toContain(
      `troupe up is already running on ${join(project, '.troupe')} (pid ${record.pid}, ${record.url}): stop it first, or add --join`,
    );
    expect(await serversUnder(project)).toHaveLength(1);

    const joined = startTroupe(['up', examplePath('demo.yaml'), '--join', '--no-agents'], cliEnv(), project);
    running.push(joined);
    await joined.waitFor(new RegExp(`troupe is up on ${record.url.replace(/[.]/g, '\\.')}`));
    // The joiner is another coordinator of the same pipeline on the same server: tasks still run.
    const submitted = await troupe(['submit', 'demo', 'hello', '--wait'], cliEnv(), 60_000, project);
    expect(submitted.code, submitted.stderr).toBe(0);
    expect(await serversUnder(project)).toHaveLength(1);
  });

  it('stops the nats-server a killed troupe up left behind before starting its own', async () => {
    project = await mkdtemp(join(tmpdir(), 'troupe-project-'));
    const killed = startTroupe(['up', examplePath('demo.yaml')], cliEnv(), project);
    await killed.waitFor(/troupe is up/);
    await killed.stop('SIGKILL');
    const orphans = await serversUnder(project);
    expect(orphans).toHaveLength(1);

    const next = startTroupe(['up', examplePath('demo.yaml')], cliEnv(), project);
    running.push(next);
    await next.waitFor(/troupe is up/);
    const now = await serversUnder(project);
    expect(now).toHaveLength(1);
    expect(now).not.toContain(orphans[0]);
  });

  it('finds the home from any directory inside the project, or from TROUPE_HOME', async () => {
    project = await mkdtemp(join(tmpdir(), 'troupe-project-'));
    const up = startTroupe(['up', examplePath('demo.yaml')], cliEnv(), project);
    running.push(up);
    await up.waitFor(/troupe is up/);
    const deep = join(project, 'src', 'lib');
    await mkdir(deep, { recursive: true });
    const fromDeep = await troupe(['status', '--all'], cliEnv(), 30_000, deep);
    expect(fromDeep.code, fromDeep.stderr).toBe(0);
    const elsewhere = await mkdtemp(join(tmpdir(), 'troupe-elsewhere-'));
    try {
      const lost = await troupe(['status'], cliEnv(), 30_000, elsewhere);
      expect(lost.code).toBe(1);
      expect(lost.stderr).toContain('no NATS server to talk to');
      const viaEnv = await troupe(
        ['status'],
        cliEnv({ TROUPE_HOME: join(project, '.troupe') }),
        30_000,
        elsewhere,
      );
      expect(viaEnv.code, viaEnv.stderr).toBe(0);
      // An empty NATS_URL counts as unset: the recorded server is used.
      const emptyUrl = await troupe(['status'], cliEnv({ NATS_URL: '' }), 30_000, deep);
      expect(emptyUrl.code, emptyUrl.stderr).toBe(0);
    } finally {
      await rm(elsewhere, { recursive: true, force: true });
    }
  });
});
