import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, startTroupe } from './support/cli.ts';
import { fixturePath } from './support/harness.ts';
import { type NatsUsers, writeNatsUsers } from './support/natsUsers.ts';

/**
 * The gateway and the coordinator each on the NATS user `troupe nats-config` makes for it (the gateway in an account
 * of its own): a task queued through the gateway while no coordinator runs is read, listed and cancelled through its
 * mark in KV `queued`, and the coordinator that starts later honours the cancel and takes the other's mark.
 */
describe('queued tasks on nats-config users', () => {
  let nats: TestNats;
  let users: NatsUsers;
  let dir: string;
  const processes: CliProcess[] = [];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'troupe-queued-roles-'));
    users = await writeNatsUsers([fixturePath('summing.yaml'), '--gateway', 'front']);
    nats = await startTestNats({ config: users.config });
  });
  afterAll(async () => {
    for (const p of processes.splice(0)) await p.stop('SIGKILL');
    await nats?.stop();
    await users?.remove();
    await rm(dir, { recursive: true, force: true });
  });

  it('shows, lists and cancels a queued task through the gateway’s own user, with no permission refused', async () => {
    const home = join(dir, 'home');
    const env = await users.env('coordinator', nats.url);
    // A coordinator makes the streams and buckets, then stops: the tasks below wait in TASKS.
    const first = startTroupe(['up', fixturePath('summing.yaml'), '--home', home], env);
    processes.push(first);
    await first.waitFor(/troupe is up/, 30_000);
    expect(await first.stop('SIGTERM')).toBe(0);
    const gateway = startTroupe(
      ['gateway', '--listen', '127.0.0.1:0', '--no-auth'],
      await users.env('front', nats.url),
    );
    processes.push(gateway);
    await gateway.waitFor(/troupe gateway on http/, 30_000);
    const url = /gateway on (http:\/\/[\d.]+:\d+)/.exec(gateway.output())?.[1] ?? '';
    const json = { 'content-type': 'application/json' };
    const get = async (path: string) => (await fetch(`${url}${path}`)).json();

    for (const id of ['qr-cancel', 'qr-run']) {
      const submitted = await fetch(`${url}/v1/pipelines/summing/tasks`, {
        method: 'POST',
        headers: json,
        body: JSON.stringify({ id, goal: 'add', input: { numbers: [1, 2] } }),
      });
      expect(submitted.status).toBe(202);
    }
    expect(await get('/v1/tasks/qr-cancel')).toMatchObject({ status: 'submitted', pipeline: 'summing' });
    const listed = (await get('/v1/tasks?status=submitted')) as { tasks: { taskId: string }[] };
    expect(listed.tasks.map((t) => t.taskId).sort()).toEqual(['qr-cancel', 'qr-run']);
    const cancelled = await fetch(`${url}/v1/tasks/qr-cancel/cancel`, {
      method: 'POST',
      headers: json,
      body: JSON.stringify({ reason: 'not needed' }),
    });
    expect(cancelled.status).toBe(200);

    const second = startTroupe(['up', fixturePath('summing.yaml'), '--home', home], env);
    processes.push(second);
    await second.waitFor(/troupe is up/, 30_000);
    const statuses = async () =>
      [
        ((await get('/v1/tasks/qr-cancel')) as { status: string }).status,
        ((await get('/v1/tasks/qr-run')) as { status: string }).status,
      ] as const;
    await expect.poll(statuses, { timeout: 30_000 }).toEqual(['cancelled', 'completed']);
    expect(await get('/v1/tasks?status=submitted')).toEqual({ tasks: [] });
    expect(gateway.output()).not.toMatch(/Permissions Violation|cannot mark the task queued/i);
    expect(second.output()).not.toMatch(/Permissions Violation/i);
  }, 120_000);
});
