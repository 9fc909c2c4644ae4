import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstream } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { BUCKETS, FINAL_EVENT_KINDS, subjects, type TroupeEvent, WorkflowRecord } from '@troupe/protocol';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type CliProcess, cliEnv, startTroupe } from './support/cli.ts';
import { eventsInMessage, fixturePath, ofKind, waiter } from './support/harness.ts';

/**
 * A new task's first step is entered with no checkpoint of its own: the record its claim created already names the
 * step's agent at work, and a run from a record with no snapshot starts the workflow again with the same step ids.
 * A coordinator killed with SIGKILL in that first step leaves only the claim's record; the next one resumes from it,
 * and every side effect of the step (a line in ledger.txt per tool call) happens once.
 */
describe('kill -9 in the first step of a new task', () => {
  let nats: TestNats;
  let client: NatsConnection;
  let home: string;
  const events: TroupeEvent[] = [];
  const processes: CliProcess[] = [];
  const { notify, waitFor: until } = waiter();

  beforeAll(async () => {
    nats = await startTestNats();
    client = await connect({ servers: nats.url, name: 'first-step-crash-test' });
    client.subscribe(subjects.allTaskEvents, {
      callback: (_error, msg) => {
        events.push(...eventsInMessage(msg));
        notify();
      },
    });
    await client.flush();
    home = await mkdtemp(join(tmpdir(), 'troupe-first-step-'));
  });
  afterAll(async () => {
    for (const p of processes.splice(0)) await p.stop('SIGKILL');
    await client?.close();
    await nats?.stop();
    if (home) await rm(home, { recursive: true, force: true });
  });

  const eventsOf = (taskId: string) => events.filter((e) => e.taskId === taskId);
  const ledgerOf = (id: string): string[] => {
    try {
      return readFileSync(join(home, 'workspaces', 'crashy', id, 'ledger.txt'), 'utf8')
        .split('\n')
        .filter(Boolean);
    } catch {
      return [];
    }
  };
  const up = (): CliProcess => {
    const p = startTroupe(
      [
        'up',
        fixturePath('crashy.yaml'),
        '--ack-wait',
        '2',
        '--step-heartbeat',
        '0.5',
        '--server',
        nats.url,
        '--home',
        home,
      ],
      cliEnv(),
    );
    processes.push(p);
    return p;
  };

  it('resumes from the claim record and completes, each tool call taking effect once', async () => {
    const id = 'first-step-1';
    const coordinator = up();
    await coordinator.waitFor(/troupe is up/);
    await jetstream(client).publish(
      subjects.task('crashy'),
      JSON.stringify({ id, goal: 'record the entries' }),
      {
        msgID: id,
      },
    );
    // The first tool call has taken effect (its line is in the ledger) and sleeps before its result: kill now.
    // Polled: no event comes between the line being written and the call's result.
    await vi.waitFor(
      () => {
        expect(ofKind(eventsOf(id), 'tool.call')).toHaveLength(1);
        expect(ofKind(eventsOf(id), 'tool.result')).toHaveLength(0);
        expect(ledgerOf(id)).toEqual(['first']);
      },
      { timeout: 30_000, interval: 20 },
    );
    const workflows = await new Kvm(client).open(BUCKETS.workflows);
    const record = WorkflowRecord.parse((await workflows.get(id))?.json());
    await coordinator.stop('SIGKILL');
    processes.splice(processes.indexOf(coordinator), 1);
    // Only the claim's record was written: no snapshot, the first step's agent named at work from the claim on.
    expect(record).toMatchObject({
      status: 'running',
      state: 'record',
      progress: 0,
      activity: { kind: 'agent', step: 'record', agent: 'clerk' },
    });
    expect(record.snapshot).toBeUndefined();

    up();
    const final = await until(
      () => eventsOf(id).find((e) => FINAL_EVENT_KINDS.includes(e.kind)),
      'the resumed task to end',
    );
    expect(final.kind, JSON.stringify(final.data)).toBe('task.completed');
    // Resumed by the second delivery, from the record's start: the first step entered again (its events have the
    // ids they had, so EVENTS keeps one of each), and the call cut short is not run again.
    const resumed = ofKind(eventsOf(id), 'task.resumed');
    expect(resumed.map((e) => e.data)).toEqual([{ state: 'record', round: 1, deliveries: 2 }]);
    expect(ofKind(eventsOf(id), 'task.accepted')).toHaveLength(1);
    // In the trace the first run began, which the claim's record kept.
    expect(record.traceparent).toBe(ofKind(eventsOf(id), 'task.accepted')[0]?.traceparent);
    expect(new Set(eventsOf(id).map((e) => e.traceparent.split('-')[1])).size).toBe(1);
    const lines = ledgerOf(id);
    expect(
      lines.filter((l) => l === 'first'),
      JSON.stringify(lines),
    ).toHaveLength(1);
    expect(
      lines.filter((l) => l === 'second'),
      JSON.stringify(lines),
    ).toHaveLength(1);
    const results = ofKind(eventsOf(id), 'tool.result');
    // The first call was cut short between its claim and its result: in doubt, not run again.
    expect(results.some((r) => r.data.error?.code === 'in_doubt')).toBe(true);
    expect(eventsOf(id).filter((e) => FINAL_EVENT_KINDS.includes(e.kind))).toHaveLength(1);
  }, 90_000);
});
