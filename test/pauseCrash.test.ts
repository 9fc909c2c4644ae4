import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstream } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  AgentStepRequest,
  BUCKETS,
  type ControlReceipt,
  type ErrorReply,
  FINAL_EVENT_KINDS,
  subjects,
  type WorkflowRecord,
} from '@troupe/protocol';
import type { TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, cliEnv, startTroupe, troupe } from './support/cli.ts';
import { facts, fixturePath, ofKind, waiter } from './support/harness.ts';
import { type KillTestServer, startKillTestServer } from './support/natsUsers.ts';

/**
 * Pause, resume and tell across a coordinator killed with SIGKILL: the pause and the message are recorded before
 * their receipts, so the coordinator that gets the task again holds it (no model call while it is held) and gives
 * the message to the next step exactly once.
 */
describe('pause, resume and tell across kill -9', () => {
  let server: KillTestServer;
  let nats: TestNats;
  let client: NatsConnection;
  let home: string;
  const processes: CliProcess[] = [];
  /** The step requests sent to the shipper, as a plain subscriber beside the queue group sees them. */
  const shipperSteps: AgentStepRequest[] = [];
  const { notify, waitFor: until } = waiter();

  beforeAll(async () => {
    home = await mkdtemp(join(tmpdir(), 'troupe-paused-'));
    server = await startKillTestServer(fixturePath('confirming.yaml'), false, 'pause-test', notify);
    ({ nats, client } = server);
    client.subscribe(subjects.agent('confirming', 'shipper'), {
      callback: (_error, msg) => {
        shipperSteps.push(AgentStepRequest.parse(msg.json()));
        notify();
      },
    });
    await client.flush();
  });
  afterAll(async () => {
    for (const p of processes.splice(0)) await p.stop('SIGKILL');
    await server?.stop();
    await rm(home, { recursive: true, force: true });
  });

  const eventsOf = (taskId: string) => server.events.filter((e) => e.taskId === taskId);
  const up = () => {
    const p = startTroupe(
      ['up', fixturePath('confirming.yaml'), '--ack-wait', '2', '--server', nats.url, '--home', home],
      cliEnv(),
    );
    processes.push(p);
    return p;
  };
  const control = async (taskId: string, message: Record<string, unknown>) =>
    (await client.request(subjects.control(taskId), JSON.stringify(message), { timeout: 15_000 })).json<
      ControlReceipt | ErrorReply
    >();
  const recordOf = async (taskId: string) =>
    (await (await new Kvm(client).open(BUCKETS.workflows)).get(taskId))?.json<WorkflowRecord>();
  const modelCalls = (taskId: string, step: string) =>
    ofKind(eventsOf(taskId), 'llm.request').filter((e) => e.data.stepId.startsWith(`${taskId}.${step}.`));

  it('keeps a paused task held through a kill, takes the answer given meanwhile, and runs on only after resume', async () => {
    const first = up();
    await first.waitFor(/troupe is up/);
    await jetstream(client).publish(
      subjects.task('confirming'),
      JSON.stringify({ id: 'held-1', goal: 'Release 2.0' }),
      { msgID: 'held-1' },
    );
    const question = await until(() => ofKind(eventsOf('held-1'), 'human.asked')[0], 'the question');

    expect(await control('held-1', { action: 'pause', by: 'ann', reason: 'check the notes' })).toEqual({
      ok: true,
      taskId: 'held-1',
      outcome: 'paused',
    });
    expect(await control('held-1', { action: 'tell', text: 'ship it quietly' })).toEqual({
      ok: true,
      taskId: 'held-1',
      outcome: 'told',
      messageId: 'm-1',
    });
    expect((await recordOf('held-1'))?.paused).toMatchObject({ by: 'ann', reason: 'check the notes' });
    await first.stop('SIGKILL');
    processes.splice(processes.indexOf(first), 1);

    // Answered while no coordinator runs: the answer is kept, and the task holds at its next agent step.
    const answered = await troupe(
      ['answer', question.data.questionId, '{"ship": true}', '--server', nats.url],
      cliEnv(),
    );
    expect(answered.code).toBe(0);
    up();
    await until(() => ofKind(eventsOf('held-1'), 'task.resumed')[0], 'the task to resume', 60_000);
    await expect
      .poll(async () => (await recordOf('held-1'))?.state, { timeout: 30_000, interval: 100 })
      .toBe('ship');
    expect((await recordOf('held-1'))?.paused).toMatchObject({ by: 'ann' });
    // A round trip through the coordinator holding it: it runs the task, and still sends nothing.
    expect(await control('held-1', { action: 'pause' })).toMatchObject({
      ok: false,
      error: { code: 'already_paused' },
    });
    expect(modelCalls('held-1', 'ship')).toHaveLength(0);
    expect(shipperSteps).toHaveLength(0);

    expect(await control('held-1', { action: 'resume', by: 'bob' })).toEqual({
      ok: true,
      taskId: 'held-1',
      outcome: 'resumed',
    });
    const final = await until(
      () => eventsOf('held-1').find((e) => FINAL_EVENT_KINDS.includes(e.kind)),
      'held-1 to end',
      60_000,
    );
    expect(final).toMatchObject({ kind: 'task.completed', data: { output: 'Release is shipped.' } });
    // As facts: the restored task published its pause and unread message again, under the ids they had.
    const mine = facts(eventsOf('held-1'));
    expect(ofKind(mine, 'task.resumed').map((e) => e.data.after ?? 'redelivery')).toEqual([
      'redelivery',
      'pause',
    ]);
    expect(ofKind(mine, 'task.paused')).toHaveLength(1);
    expect(ofKind(mine, 'task.told').map((e) => e.data)).toEqual([
      { messageId: 'm-1', text: 'ship it quietly' },
    ]);
    // The draft ran once, before the pause; the ship step once, after the resume, told the message once.
    expect(modelCalls('held-1', 'draft')).toHaveLength(1);
    expect(modelCalls('held-1', 'ship')).toHaveLength(1);
    expect(shipperSteps.map((s) => s.told?.map((m) => m.text))).toEqual([['ship it quietly']]);
    expect(ofKind(mine, 'human.asked')).toHaveLength(1);

    // Every operation on a finished or unknown task is refused, saying so.
    for (const action of [{ action: 'pause' }, { action: 'resume' }, { action: 'tell', text: 'late' }]) {
      expect(await control('held-1', action)).toEqual({
        ok: false,
        error: {
          code: 'task_ended',
          message: 'task held-1 has already ended: completed; nothing was changed',
        },
      });
      expect(await control('never-was', action)).toEqual({
        ok: false,
        error: { code: 'unknown_task', message: 'no task never-was is known' },
      });
    }
  });

  it('tells the sender of a pause, resume or tell for a task nobody runs that nothing was changed, and that it is paused', async () => {
    const workflows = await new Kvm(client).open(BUCKETS.workflows);
    const now = new Date().toISOString();
    const record: WorkflowRecord = {
      taskId: 'orphan-held',
      pipeline: 'confirming',
      streamSequence: 999_999,
      status: 'running',
      state: 'ship',
      goal: 'lost',
      round: 1,
      usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
      createdAt: now,
      updatedAt: now,
      paused: { since: now, by: 'ann' },
    };
    await workflows.put('orphan-held', JSON.stringify(record));
    if (processes.length === 0) await up().waitFor(/troupe is up/);
    const reply = await control('orphan-held', { action: 'tell', text: 'hello' });
    expect(reply).toMatchObject({ ok: false, error: { code: 'not_running' } });
    const message = reply.ok ? '' : reply.error.message;
    expect(message).toContain('nothing was changed');
    expect(message).toContain(`it is paused (since ${now})`);
    expect(message).toContain('try again once it runs');
    // The same on the pipeline's steering subject, where people who may only steer send it.
    const steered = (
      await client.request(
        subjects.steer('confirming', 'orphan-held'),
        JSON.stringify({ action: 'resume' }),
        {
          timeout: 15_000,
        },
      )
    ).json<ErrorReply>();
    expect(steered.error.code).toBe('not_running');
    expect(steered.error.message).toContain(`it is paused (since ${now})`);
  });
});
