import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstream } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import {
  BUCKETS,
  type ControlReceipt,
  type ErrorReply,
  subjects,
  type WorkflowRecord,
} from '@troupe/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cliEnv } from './support/cli.ts';
import { fixturePath, ofKind, waiter } from './support/harness.ts';
import { type KillTestServer, startKillTestServer } from './support/natsUsers.ts';
import { type UpProcesses, upProcesses } from './support/upProcesses.ts';

/**
 * A sub-task paused with its parent, its coordinator killed (SIGKILL), its parent resumed meanwhile and the parent's
 * coordinator killed too, before its forwarded resume reached anybody: the coordinator that gets the sub-task again
 * restores it held, reads its parent's record, and lets it go, with no resume sent to it.
 */
describe('a sub-task paused with its parent, across kill -9 of both coordinators', () => {
  let server: KillTestServer;
  let home: string;
  let parents: UpProcesses;
  let children: UpProcesses;
  const { notify, waitFor: until } = waiter();

  beforeAll(async () => {
    server = await startKillTestServer(fixturePath('parentkill.yaml'), false, 'sub-task-kill-test', notify);
    home = await mkdtemp(join(tmpdir(), 'troupe-sub-kill-'));
    // Each pipeline's tasks in coordinators of their own: the sub-task's can die while the parent's runs.
    parents = upProcesses(fixturePath('parentkill.yaml'), server.nats.url, home, cliEnv());
    children = upProcesses(fixturePath('confirming.yaml'), server.nats.url, home, cliEnv());
  });
  afterAll(async () => {
    await parents?.stopAll('SIGKILL');
    await children?.stopAll('SIGKILL');
    await server?.stop();
    if (home) await rm(home, { recursive: true, force: true });
  });

  const control = async (taskId: string, message: Record<string, unknown>) =>
    (
      await server.client.request(subjects.control(taskId), JSON.stringify(message), { timeout: 15_000 })
    ).json<ControlReceipt | ErrorReply>();
  const recordOf = async (taskId: string) =>
    (await (await new Kvm(server.client).open(BUCKETS.workflows)).get(taskId))?.json<WorkflowRecord>();

  it('goes on by itself once its coordinator is back, its parent no longer paused', async () => {
    await children.up();
    await parents.up();
    await jetstream(server.client).publish(
      subjects.task('parentkill'),
      JSON.stringify({ id: 'pk-1', goal: 'Release 2.0' }),
      { msgID: 'pk-1' },
    );
    // The sub-task asks its person: its coordinator holds it there once paused.
    const asked = await until(
      () => ofKind(server.events, 'human.asked').find((e) => e.taskId !== 'pk-1'),
      'the sub-task to ask',
      60_000,
    );
    const subId = asked.taskId;
    expect(await control('pk-1', { action: 'pause', by: 'ann' })).toMatchObject({
      ok: true,
      outcome: 'paused',
    });
    await expect
      .poll(async () => (await recordOf(subId))?.paused, { timeout: 15_000 })
      .toMatchObject({ by: 'task pk-1' });

    await children.stopAll('SIGKILL');
    expect(await control('pk-1', { action: 'resume', by: 'ann' })).toMatchObject({
      ok: true,
      outcome: 'resumed',
    });
    // Its forward of the resume, tried while nobody runs the sub-task, dies with it.
    await parents.stopAll('SIGKILL');
    expect((await recordOf('pk-1'))?.paused).toBeUndefined();
    expect((await recordOf(subId))?.paused).toMatchObject({ by: 'task pk-1' });

    await children.up();
    await expect.poll(async () => (await recordOf(subId))?.paused, { timeout: 30_000 }).toBeUndefined();
    const resumed = await until(
      () => ofKind(server.events, 'task.resumed').find((e) => e.taskId === subId && e.data.after === 'pause'),
      'the sub-task to go on',
    );
    expect(resumed.data).toMatchObject({ by: 'task pk-1' });
    expect((await recordOf(subId))?.status).toBe('running');
  });
});
