import { OperationError, pauseTask, replyToHuman, resumeTask } from '@troupe/client';
import { BUCKETS, HumanRequest } from '@troupe/protocol';
import { KvStore, underPrefix } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  fixturePath,
  type Harness,
  ofKind,
  publishTask,
  startHarness,
  waitUntil,
} from './support/harness.ts';

const HOUR = 3_600_000;

describe('an approval asked before its task was paused, over a real nats-server', () => {
  let h: Harness;

  beforeAll(async () => {
    h = await startHarness([fixturePath('gated.yaml')]);
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('is held on its record, stays answerable past its expiresAt, and its decision is acted on once after the resume', async () => {
    publishTask(h, 'gated', { id: 'held-ap', goal: 'release v1' });
    await waitUntil(() => ofKind(h.eventsOf('held-ap'), 'approval.requested').length > 0);
    const asked = ofKind(h.eventsOf('held-ap'), 'approval.requested')[0];
    const id = asked?.data.approvalId as string;
    await pauseTask(h.bus, 'held-ap', { by: 'ana' });
    const approvals = underPrefix(await KvStore.open(h.bus, BUCKETS.approvals, HumanRequest), 'gated');
    await expect.poll(async () => (await approvals.get(id))?.value.held, { timeout: 5_000 }).toBeDefined();
    const held = (await approvals.get(id))?.value as HumanRequest;
    expect(held.status).toBe('pending');
    // A person an hour past its expiresAt (the task still paused) is not refused as late.
    const later = () => Date.parse(held.expiresAt) + HOUR;
    const outcome = await replyToHuman(
      h.bus,
      id,
      { kind: 'approval', decision: { decision: 'allow', by: 'bo' } },
      { now: later },
    );
    expect(outcome.status).toBe('allowed');
    await waitUntil(() => ofKind(h.eventsOf('held-ap'), 'approval.decided').length > 0);
    expect(ofKind(h.eventsOf('held-ap'), 'approval.decided')[0]?.data).toMatchObject({
      decision: 'allow',
      by: 'bo',
    });
    await resumeTask(h.bus, 'held-ap', { by: 'ana' });
    const final = await h.finalOf('held-ap', 20_000);
    expect(final.kind).toBe('task.completed');
    // The allowed call ran once, allowed by the person, and was decided once.
    const calls = ofKind(h.eventsOf('held-ap'), 'tool.result').filter(
      (e) => e.data.callId === asked?.data.callId,
    );
    // The run sent again after the resume replays the call's journaled result: the same event (one id), not a new run.
    expect(new Set(calls.map((e) => e.id)).size).toBe(1);
    expect(calls[0]?.data).toMatchObject({ ok: true, tool: 'write_file' });
    const decided = ofKind(h.eventsOf('held-ap'), 'approval.decided');
    expect(new Set(decided.map((e) => e.id)).size).toBe(1);
    expect(decided.every((e) => e.data.decision === 'allow' && e.data.by === 'bo')).toBe(true);
  });

  it('still refuses an answer past the expiresAt of a request that is not held', async () => {
    publishTask(h, 'gated', { id: 'late-ap', goal: 'release v2' });
    await waitUntil(() => ofKind(h.eventsOf('late-ap'), 'approval.requested').length > 0);
    const id = ofKind(h.eventsOf('late-ap'), 'approval.requested')[0]?.data.approvalId as string;
    const approvals = underPrefix(await KvStore.open(h.bus, BUCKETS.approvals, HumanRequest), 'gated');
    const record = (await approvals.get(id))?.value as HumanRequest;
    const reply = replyToHuman(
      h.bus,
      id,
      { kind: 'approval', decision: { decision: 'allow', by: 'bo' } },
      { now: () => Date.parse(record.expiresAt) + 1 },
    );
    await expect(reply).rejects.toBeInstanceOf(OperationError);
    await expect(reply).rejects.toThrow(/expired at/);
    await replyToHuman(h.bus, id, { kind: 'approval', decision: { decision: 'deny', by: 'bo' } });
    expect((await h.finalOf('late-ap', 20_000)).kind).toBe('task.completed');
  });
});
