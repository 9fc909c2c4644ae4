import { BUCKETS, HumanRequest } from '@troupe/protocol';
import { KvStore } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cliEnv, troupe } from './support/cli.ts';
import {
  fixturePath,
  found,
  type Harness,
  kinds,
  ofKind,
  publishTask,
  startHarness,
  startSecondCoordinator,
} from './support/harness.ts';

/** When a task ends, however it ends, nothing of it keeps running and nothing of it waits for a person. */
describe('a task that ends', () => {
  let h: Harness;
  let env: NodeJS.ProcessEnv;

  beforeAll(async () => {
    h = await startHarness([
      fixturePath('insistent.yaml'),
      fixturePath('overdue.yaml'),
      fixturePath('gated.yaml'),
    ]);
    env = cliEnv({ NATS_URL: h.nats.url });
  });
  afterAll(async () => {
    await h?.stop();
  });

  const requestsOf = async (taskId: string): Promise<HumanRequest[]> => {
    const store = await KvStore.open(h.bus, BUCKETS.approvals, HumanRequest);
    const records: HumanRequest[] = [];
    for (const key of await store.keys()) {
      const record = (await store.get(key))?.value;
      if (record?.taskId === taskId) records.push(record);
    }
    return records;
  };

  it('fails with approval_timeout when its step times out waiting for a person, and asks nobody afterwards', async () => {
    publishTask(h, 'insistent', { id: 'insist-1', goal: 'release v1' });
    const final = await h.finalOf('insist-1');
    expect(final.kind).toBe('task.failed');
    if (final.kind !== 'task.failed') return;
    expect(final.data.reason).toBe('approval_timeout');
    expect(final.data.message).toMatch(/nobody decided approval ap-\S+ within the step timeout \(3 s\)/);
    const asked = ofKind(h.eventsOf('insist-1'), 'approval.requested').length;
    expect(asked).toBeGreaterThan(1);
    // The approval the step waited on when it ran out of time was closed, saying why: the agent host's own timer
    // ran out, or (on a loaded machine, when the host got the step late) the task ended first.
    await expect
      .poll(() => ofKind(h.eventsOf('insist-1'), 'approval.decided').at(-1)?.data)
      .toMatchObject({
        decision: 'deny',
        expired: true,
        reason: expect.stringMatching(
          /^closed before anyone decided: (the step ran out of time|task insist-1 has ended: failed \(approval_timeout\))$/,
        ),
      });
    // Past the point where a step left running would have asked again (every second), nothing more is asked.
    const after = Date.now() + 2_500;
    await expect.poll(() => Date.now() > after, { timeout: 5_000 }).toBe(true);
    expect(ofKind(h.eventsOf('insist-1'), 'approval.requested')).toHaveLength(asked);
    const last = kinds(h.eventsOf('insist-1')).lastIndexOf('task.failed');
    expect(kinds(h.eventsOf('insist-1')).slice(last + 1)).not.toContain('llm.request');
    // Nothing of the task is left pending, and a person who decides late is told how the task ended.
    const records = await requestsOf('insist-1');
    expect(records.map((r) => r.status)).not.toContain('pending');
    const latest = records.sort((a, b) => a.requestedAt.localeCompare(b.requestedAt)).at(-1);
    const late = await troupe(['approve', latest?.id ?? ''], env);
    expect(late.code).toBe(1);
    expect(late.stderr).toContain(
      `task insist-1 has ended: failed (approval_timeout); nothing waits for it, nothing changed`,
    );
    expect((await troupe(['approvals'], env)).stdout).not.toContain('insist-1');
  });

  it('closes the approval a cancelled task waited on, with how the task ended', async () => {
    publishTask(h, 'gated', { id: 'gate-cancelled', goal: 'release v1' });
    const requested = await found(() => ofKind(h.eventsOf('gate-cancelled'), 'approval.requested')[0]);
    expect((await troupe(['cancel', 'gate-cancelled'], env)).code).toBe(0);
    expect((await h.finalOf('gate-cancelled')).kind).toBe('task.cancelled');
    await expect
      .poll(() => ofKind(h.eventsOf('gate-cancelled'), 'approval.decided')[0]?.data)
      .toMatchObject({
        approvalId: requested.data.approvalId,
        decision: 'deny',
        expired: true,
        reason: 'closed before anyone decided: task gate-cancelled has ended: cancelled',
      });
    await expect
      .poll(async () => (await requestsOf('gate-cancelled')).map((r) => [r.status, r.taskEnded]))
      .toEqual([['closed', { status: 'cancelled' }]]);
  });

  // Last: it stops the harness's coordinator.
  it('fails on its wall-clock budget after a restart, counting what it spent before, and closes its approval', async () => {
    publishTask(h, 'overdue', { id: 'overdue-1', goal: 'release v1' });
    const requested = await found(
      () => ofKind(h.eventsOf('overdue-1'), 'approval.requested')[0],
      'the approval',
    );
    const acceptedAt = Date.parse(
      ofKind(h.eventsOf('overdue-1'), 'task.accepted')[0]?.ts ?? new Date().toISOString(),
    );
    await h.coordinator.stop();
    // The stop leaves the approval pending for the run that comes next.
    expect((await requestsOf('overdue-1')).map((r) => r.status)).toEqual(['pending']);
    await expect.poll(() => Date.now() > acceptedAt + 4_500, { timeout: 10_000 }).toBe(true);

    const next = await startSecondCoordinator(h, ['overdue.yaml']);
    try {
      const final = await h.finalOf('overdue-1', 40_000);
      expect(final.kind).toBe('task.failed');
      if (final.kind !== 'task.failed') return;
      expect(final.data.reason).toBe('budget_exceeded');
      // The model call made before the stop counts: it is in the step's journal.
      expect(final.data.usage).toMatchObject({ inputTokens: 120, outputTokens: 30, modelCalls: 1 });
      await expect
        .poll(async () => (await requestsOf('overdue-1')).map((r) => [r.id, r.status, r.taskEnded]))
        .toEqual([[requested.data.approvalId, 'closed', { status: 'failed', reason: 'budget_exceeded' }]]);
      const late = await troupe(['approve', requested.data.approvalId], env);
      expect(late.stderr).toContain('task overdue-1 has ended: failed (budget_exceeded)');
    } finally {
      await next.stop();
    }
  });
});

describe('the final event of a task', () => {
  let h: Harness;
  const lines: string[] = [];

  beforeAll(async () => {
    h = await startHarness([fixturePath('slowpoke.yaml')], { logLines: lines });
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('stops the steps of that task on every agent host, wherever its workflow runs', async () => {
    publishTask(h, 'slowpoke', { id: 'ended-elsewhere', goal: 'take your time' });
    const request = await expect
      .poll(() => ofKind(h.eventsOf('ended-elsewhere'), 'llm.request')[0], { timeout: 20_000 })
      .toBeDefined();
    void request;
    // As a coordinator that ended the task would announce it (this one still waits for the step).
    const ended = {
      id: 'ended-elsewhere:task.failed',
      ts: new Date().toISOString(),
      pipeline: 'slowpoke',
      taskId: 'ended-elsewhere',
      kind: 'task.failed',
      from: 'workflow',
      to: 'user',
      traceparent: '00-00000000000000000000000000000001-0000000000000001-01',
      data: {
        reason: 'step_timeout',
        message: 'ended elsewhere',
        usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
        durationMs: 1,
      },
    };
    h.client.publish('troupe.events.slowpoke.ended-elsewhere.task.failed', JSON.stringify(ended));
    await expect
      .poll(() => lines.some((l) => l.includes('task ended-elsewhere has ended; stopping its step here')), {
        timeout: 10_000,
      })
      .toBe(true);
    // The model call in flight was aborted: it never answers, and the step replies at once rather than in 30 s.
    const completed = await expect
      .poll(() => ofKind(h.eventsOf('ended-elsewhere'), 'step.completed')[0]?.data.ok, { timeout: 10_000 })
      .toBe(false);
    void completed;
    expect(kinds(h.eventsOf('ended-elsewhere'))).not.toContain('llm.response');
  });
});
