import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstream } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import { BUCKETS, FINAL_EVENT_KINDS, subjects } from '@troupe/protocol';
import type { TestNats } from '@troupe/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, cliEnv, startTroupe, troupe } from './support/cli.ts';
import { facts, fixturePath, ofKind, waiter } from './support/harness.ts';
import { type KillTestServer, SERVERS, startKillTestServer } from './support/natsUsers.ts';

/**
 * A coordinator killed with SIGKILL while a parallel step has one branch done and one running: the next one
 * resumes the task from its checkpoint and runs only the branch that had not finished. On an open server, and again
 * on one whose users `troupe nats-config` wrote (the coordinator, the person answering and the test's own client
 * each on its own).
 */
describe.each(SERVERS)('kill -9 in a parallel, foreach or human step, on $server', ({ users: withUsers }) => {
  let server: KillTestServer;
  let nats: TestNats;
  let coordinatorEnv = cliEnv();
  let approverEnv = cliEnv();
  let client: NatsConnection;
  let home: string;
  const processes: CliProcess[] = [];
  /** Every process the test started, killed or not. */
  const started: CliProcess[] = [];
  const { notify, waitFor: until } = waiter();

  beforeAll(async () => {
    home = await mkdtemp(join(tmpdir(), 'troupe-forked-'));
    server = await startKillTestServer(fixturePath('confirming.yaml'), withUsers, 'forked-test', notify);
    ({ nats, client } = server);
    coordinatorEnv = server.env.coordinator;
    approverEnv = server.env.approver;
  });
  afterEach(() => {
    // Nothing any part needed was refused it.
    for (const p of started.splice(0)) expect(p.output()).not.toMatch(/Permissions Violation/i);
  });
  afterAll(async () => {
    for (const p of processes.splice(0)) await p.stop('SIGKILL');
    await server?.stop();
    await rm(home, { recursive: true, force: true });
  });

  const eventsOf = (taskId: string) => server.events.filter((e) => e.taskId === taskId);
  const up = (pipeline = 'forked.yaml') => {
    const p = startTroupe(
      ['up', fixturePath(pipeline), '--ack-wait', '2', '--server', nats.url, '--home', home],
      coordinatorEnv,
    );
    processes.push(p);
    started.push(p);
    return p;
  };
  const ledger = (id: string, pipeline = 'forked') => {
    try {
      return readFileSync(join(home, 'workspaces', pipeline, id, 'ledger.txt'), 'utf8')
        .split('\n')
        .filter(Boolean);
    } catch {
      return [];
    }
  };

  it('resumes without running the finished branch again', async () => {
    const ids = ['fork-1', 'fork-2', 'fork-3'];
    const first = up();
    await first.waitFor(/troupe is up/);
    const js = jetstream(client);
    for (const id of ids) {
      await js.publish(subjects.task('forked'), JSON.stringify({ id, goal: 'record and think' }), {
        msgID: id,
      });
    }
    // Killed once every task's checkpoint says the fast branch is done and the long one runs.
    const workflows = await new Kvm(client).open(BUCKETS.workflows);
    await expect
      .poll(
        async () =>
          Promise.all(ids.map(async (id) => (await workflows.get(id))?.json<{ state: string }>().state)),
        { timeout: 30_000, interval: 100 },
      )
      .toEqual(ids.map(() => 'slow'));
    expect(ids.map((id) => ofKind(eventsOf(id), 'step.completed').map((e) => e.data.step))).toEqual(
      ids.map(() => ['quick']),
    );
    await first.stop('SIGKILL');
    processes.splice(processes.indexOf(first), 1);

    up();
    await until(
      () =>
        ids.every((id) => eventsOf(id).some((e) => FINAL_EVENT_KINDS.includes(e.kind))) ? true : undefined,
      'every task to end',
      60_000,
    );
    for (const id of ids) {
      const mine = eventsOf(id);
      expect(ofKind(mine, 'task.completed')[0]?.data.output, id).toBe('joined');
      expect(ofKind(mine, 'task.resumed'), id).toHaveLength(1);
      // The fast branch ran once: one start, one line in the ledger; the long one ran again after the kill.
      expect(
        ofKind(mine, 'step.started').filter((e) => e.data.step === 'quick'),
        id,
      ).toHaveLength(1);
      expect(ledger(id), id).toEqual(['quick']);
      expect(
        ofKind(mine, 'step.started').filter((e) => e.data.step === 'slow').length,
        id,
      ).toBeGreaterThanOrEqual(1);
      const joinedEvents = ofKind(mine, 'branches.joined');
      expect(joinedEvents.at(-1)?.data, id).toMatchObject({
        ok: true,
        branches: { fast: { status: 'completed' }, long: { status: 'completed' } },
      });
      const joiner = ofKind(mine, 'step.completed').find((e) => e.data.step === 'join');
      expect(joiner?.data.ok, id).toBe(true);
    }
  });

  it('resumes a foreach of 20 items killed half done, running no finished item again and no side effect twice', async () => {
    const taskId = 'fan-1';
    const first = up('fanned.yaml');
    await first.waitFor(/troupe is up/);
    await jetstream(client).publish(
      subjects.task('fanned'),
      JSON.stringify({ id: taskId, goal: 'record 20 parts' }),
      {
        msgID: taskId,
      },
    );
    const recorded = () =>
      ofKind(eventsOf(taskId), 'step.completed').filter((e) => e.data.step === 'record' && e.data.ok).length;
    // Killed with items at work, but none between claiming its tool call and recording the result: a call cut short
    // there is in doubt and not run again (test/crash.test.ts covers those), and the ledger could not say whose line
    // is missing. Each item waits 600 ms after its call, so such a moment comes soon.
    const callsInFlight = () => {
      const results = new Set(ofKind(eventsOf(taskId), 'tool.result').map((r) => r.data.callId));
      return ofKind(eventsOf(taskId), 'tool.call').some((c) => !results.has(c.data.callId));
    };
    await until(
      () => (recorded() >= 8 && !callsInFlight() ? true : undefined),
      'eight items to be done, and no tool call in flight',
      30_000,
    );
    await first.stop('SIGKILL');
    processes.splice(processes.indexOf(first), 1);
    const killedAt = eventsOf(taskId).length;

    // The items the last checkpoint has as done, and those it has at work.
    const workflows = await new Kvm(client).open(BUCKETS.workflows);
    const record = (await workflows.get(taskId))?.json<{
      snapshot: { context: { foreach: { each: { results: unknown[]; started: number } } }; children: object };
    }>();
    const progress = record?.snapshot.context.foreach.each;
    const done = (progress?.results ?? []).flatMap((r, index) => (r === null ? [] : [index]));
    expect(done.length).toBeGreaterThan(0);
    expect(done.length).toBeLessThan(20);
    expect(Object.keys(record?.snapshot.children ?? {}).length).toBeGreaterThan(0);

    up('fanned.yaml');
    const final = await until(
      () => eventsOf(taskId).find((e) => FINAL_EVENT_KINDS.includes(e.kind)),
      `${taskId} to end`,
      60_000,
    );
    expect(final).toMatchObject({ kind: 'task.completed', data: { output: 'joined' } });
    const mine = eventsOf(taskId);
    expect(ofKind(mine, 'task.resumed')).toHaveLength(1);
    expect(ofKind(mine, 'items.joined').at(-1)?.data).toMatchObject({
      items: 20,
      completed: 20,
      failed: [],
      ok: true,
    });
    // No item the checkpoint had as done was started again after the kill.
    const startedAfter = ofKind(mine.slice(killedAt), 'step.started').map((e) => e.data.item);
    for (const index of done) expect(startedAfter, `item ${index}`).not.toContain(index);
    // Every item wrote its ledger line once, those at work at the kill included (their tool call was journaled); but
    // for a call the kill cut short after all (its tool.call event still on its way to this test when it killed, on a
    // busy machine), which is in doubt and not run again: it wrote its line at most once.
    const inDoubt = ofKind(mine.slice(killedAt), 'tool.result').filter(
      (r) => r.data.error?.code === 'in_doubt',
    ).length;
    expect(ledger(taskId, 'fanned').length).toBeLessThanOrEqual(20);
    expect(ledger(taskId, 'fanned').length).toBeGreaterThanOrEqual(20 - inDoubt);
    // Each item was started at least once, and only once before the kill.
    const startedBefore = ofKind(mine.slice(0, killedAt), 'step.started').map((e) => e.data.item);
    expect(new Set(startedBefore).size).toBe(startedBefore.length);
    expect(new Set(ofKind(mine, 'step.started').map((e) => e.data.item))).toEqual(
      new Set([undefined, ...Array.from({ length: 20 }, (_, i) => i)]),
    );
  });

  it('keeps a human step waiting on the same question across a kill, and takes the answer given meanwhile', async () => {
    const first = up('confirming.yaml');
    await first.waitFor(/troupe is up/);
    await jetstream(client).publish(
      subjects.task('confirming'),
      JSON.stringify({ id: 'hold-1', goal: 'Release 2.0' }),
      { msgID: 'hold-1' },
    );
    const question = await until(() => ofKind(eventsOf('hold-1'), 'human.asked')[0], 'the question');
    await first.stop('SIGKILL');
    processes.splice(processes.indexOf(first), 1);

    // Answered while no coordinator runs: recorded for the question, taken when the task resumes.
    const answered = await troupe(
      ['answer', question.data.questionId, '{"ship": true}', '--server', nats.url],
      approverEnv,
    );
    expect(answered.stdout).toMatch(/: answered \(task hold-1/);
    up('confirming.yaml');
    const final = await until(
      () => eventsOf('hold-1').find((e) => FINAL_EVENT_KINDS.includes(e.kind)),
      'hold-1 to end',
      60_000,
    );
    expect(final).toMatchObject({ kind: 'task.completed', data: { output: 'Release is shipped.' } });
    const mine = eventsOf('hold-1');
    // The question was asked once; the draft was not written again.
    expect(ofKind(facts(mine), 'human.asked')).toHaveLength(1);
    expect(ofKind(mine, 'step.started').filter((e) => e.data.step === 'draft')).toHaveLength(1);
    expect(ofKind(mine, 'task.resumed')).toHaveLength(1);
  });
});
