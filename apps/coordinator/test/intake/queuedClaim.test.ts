import { cancelQueued } from '@troupe/client';
import { QUEUED_MARK_HEADER, QueuedTask } from '@troupe/protocol';
import { MemoryKv } from '@troupe/testkit';
import { describe, expect, it } from 'vitest';
import { claim } from '../../src/intake/claim.ts';
import { type Triage, triage } from '../../src/intake/triage.ts';
import { deliveryOf, intakeServices } from './taskServices.ts';

const AT = '2026-12-06T10:00:00.000Z';
const mark = (taskId: string): QueuedTask => ({
  taskId,
  pipeline: 'unit',
  goal: 'g',
  metadata: { ticket: 'T-1' },
  submittedAt: AT,
});

/** Intake services with the `queued` bucket, in memory. */
function withQueued() {
  const intake = intakeServices();
  const queued = new MemoryKv(QueuedTask);
  return { ...intake, queued, services: { ...intake.services, queued } };
}

/** The header the gateway's publish carries, as every delivery of the stored message does. */
const MARKED = { [QUEUED_MARK_HEADER]: '1' };

/**
 * The runner's way with a delivery: triage, then claim when triage says so. The message says it has a mark, as one
 * the gateway published does, unless `marked` is false (`troupe submit`, a plain NATS client).
 */
async function deliver(
  services: ReturnType<typeof withQueued>['services'],
  taskId: string,
  { deliveryCount = 1, marked = true }: { deliveryCount?: number; marked?: boolean } = {},
): Promise<{ triaged: Triage; claimed?: Awaited<ReturnType<typeof claim>> }> {
  const headers = marked ? MARKED : {};
  const triaged = await triage(services, deliveryOf({ id: taskId, goal: 'g' }, { deliveryCount, headers }));
  if (triaged.next !== 'claim') return { triaged };
  return { triaged, claimed: await claim(services, triaged.task) };
}

describe('a task queued through the gateway', () => {
  it('is claimed as any task when it was not cancelled, and its mark is taken', async () => {
    const { services, queued } = withQueued();
    await queued.create('task-1', mark('task-1'));
    const { claimed } = await deliver(services, 'task-1');
    expect(claimed).toMatchObject({ next: 'run' });
    expect(claimed?.next === 'run' && claimed.claimed.orphaned).toBeUndefined();
    expect(await queued.get('task-1')).toBeUndefined();
  });

  it('ends cancelled at triage when it was cancelled while queued: recorded, announced, never claimed', async () => {
    const { services, queued, store, bus } = withQueued();
    await queued.create('task-1', mark('task-1'));
    expect(await cancelQueued(queued, 'task-1', { reason: 'not needed (token ops)', at: AT })).toBe('queued');
    const { triaged, claimed } = await deliver(services, 'task-1');
    expect(claimed).toBeUndefined();
    expect(triaged).toMatchObject({
      next: 'conclude',
      final: { kind: 'task.cancelled', taskId: 'task-1', data: { reason: 'not needed (token ops)' } },
    });
    expect((await store.get('task-1'))?.value).toMatchObject({
      status: 'cancelled',
      state: 'cancelled',
      goal: 'g',
      final: { kind: 'task.cancelled' },
    });
    await bus.settled();
    expect(bus.eventsOf('task.accepted')).toEqual([expect.objectContaining({ taskId: 'task-1' })]);
    expect(await queued.get('task-1')).toBeUndefined();
    // Delivered again (the coordinator died before the message was settled): its stored end goes out again.
    expect((await deliver(services, 'task-1', { deliveryCount: 2 })).triaged).toMatchObject({
      next: 'conclude',
      final: { kind: 'task.cancelled' },
    });
  });

  it('is cancelled as it starts when the cancel lands after triage read the mark, before the claim took it', async () => {
    const { services, queued } = withQueued();
    await queued.create('task-1', mark('task-1'));
    const triaged = await triage(services, deliveryOf({ id: 'task-1', goal: 'g' }, { headers: MARKED }));
    if (triaged.next !== 'claim') throw new Error(`triaged as ${triaged.next}`);
    expect(await cancelQueued(queued, 'task-1', { reason: 'raced', at: AT })).toBe('queued');
    expect(await claim(services, triaged.task)).toMatchObject({
      next: 'run',
      claimed: { orphaned: 'raced' },
    });
    // Kept: a claim that dies before the task has ended finds the cancel again on redelivery.
    expect((await queued.get('task-1'))?.value).toMatchObject({ cancel: { reason: 'raced' } });
    expect((await deliver(services, 'task-1', { deliveryCount: 2 })).claimed).toMatchObject({
      next: 'run',
      claimed: { orphaned: 'raced' },
    });
    // Taken: a later cancel is told to go to the coordinator running the task.
    expect(await cancelQueued(queued, 'task-1', { reason: 'again', at: AT })).toBe('claimed');
  });

  it('takes no cancel once a claim has taken the mark', async () => {
    const { services, queued } = withQueued();
    await queued.create('task-1', mark('task-1'));
    const del = queued.delete.bind(queued);
    let answered: string | undefined;
    // Asked after the take, before the mark is deleted: told to cancel through the coordinator instead.
    queued.delete = async (key) => {
      answered = await cancelQueued(queued, key, { reason: 'late', at: AT });
      return del(key);
    };
    expect((await deliver(services, 'task-1')).claimed).toMatchObject({ next: 'run' });
    expect(answered).toBe('claimed');
  });

  it("leaves alone another pipeline's mark of the same id: neither its cancel nor its take", async () => {
    const { services, queued } = withQueued();
    await queued.create('task-1', { ...mark('task-1'), pipeline: 'other' });
    await cancelQueued(queued, 'task-1', { reason: 'not this one', at: AT });
    const { claimed } = await deliver(services, 'task-1');
    expect(claimed).toMatchObject({ next: 'run' });
    expect(claimed?.next === 'run' && claimed.claimed.orphaned).toBeUndefined();
    expect((await queued.get('task-1'))?.value).toMatchObject({
      pipeline: 'other',
      cancel: { reason: 'not this one' },
    });
  });

  it('runs a task published with no mark (a plain NATS client) as before, with no read of KV queued', async () => {
    const { services, queued } = withQueued();
    const { claimed } = await deliver(services, 'plain-1', { marked: false });
    expect(claimed).toMatchObject({ next: 'run' });
    expect(claimed?.next === 'run' && claimed.claimed.orphaned).toBeUndefined();
    // Delivered again (its coordinator died mid-run): still no read, the message saying no more than before.
    expect((await deliver(services, 'plain-1', { deliveryCount: 2, marked: false })).triaged).toMatchObject({
      next: 'claim',
    });
    expect(queued.gets).toBe(0);
  });

  it('reads the mark of a marked task on a redelivery too, and takes it after a claim that died before its take', async () => {
    const { services, queued } = withQueued();
    await queued.create('task-1', mark('task-1'));
    // The first claim wrote the record, then its coordinator died before it took the mark (here: it never reads it).
    const first = await triage(services, deliveryOf({ id: 'task-1', goal: 'g' }, { headers: MARKED }));
    if (first.next !== 'claim') throw new Error(`triaged as ${first.next}`);
    const { queued: _read, ...unmarked } = first.task;
    expect(await claim(services, unmarked)).toMatchObject({ next: 'run' });
    expect(await cancelQueued(queued, 'task-1', { reason: 'asked meanwhile', at: AT })).toBe('queued');
    const reads = queued.gets;
    // Redelivered: the stored message carries its header again, so the mark is read, taken and its cancel honoured.
    expect((await deliver(services, 'task-1', { deliveryCount: 2 })).claimed).toMatchObject({
      next: 'run',
      claimed: { orphaned: 'asked meanwhile' },
    });
    expect(queued.gets - reads).toBe(1);
  });

  it('leaves a task claimed by another coordinator to it, whose claim honours the cancel', async () => {
    const { services, queued, store } = withQueued();
    await queued.create('task-1', mark('task-1'));
    // Another coordinator's claim created the record between this triage's reads.
    const first = await deliver(services, 'task-1');
    expect(first.claimed).toMatchObject({ next: 'run' });
    await queued.create('task-2', mark('task-2'));
    await cancelQueued(queued, 'task-2', { reason: 'stop', at: AT });
    const create = store.create.bind(store);
    store.create = async (key, value) => (value.status === 'cancelled' ? undefined : create(key, value));
    const { triaged } = await deliver(services, 'task-2');
    expect(triaged).toMatchObject({ next: 'claim' });
  });
});
