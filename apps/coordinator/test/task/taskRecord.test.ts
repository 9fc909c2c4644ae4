import { emptyUsage, type WorkflowRecord } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { claim } from '../../src/intake/claim.ts';
import { fencedWrite, recordFailure } from '../../src/task/taskRecord.ts';
import { intakeServices, triagedTask } from '../intake/taskServices.ts';

/** A claimed task's services, store and lease. */
async function claimedTask() {
  const { services, store } = intakeServices();
  const claimed = await claim(services, triagedTask({ id: 'task-1', goal: 'plan it' }));
  if (claimed.next !== 'run') throw new Error(`claimed as ${claimed.next}`);
  const current = await store.get('task-1');
  if (current === undefined) throw new Error('no record after the claim');
  return {
    services,
    store,
    claimed: claimed.claimed,
    lease: claimed.claimed.lease,
    claimedRecord: current.value,
  };
}

describe("a write of a task's record under its lease", () => {
  it("has the bus send the task's open events before a crashed workflow's failure record", async () => {
    const { services, store, claimed, lease } = await claimedTask();
    const order: string[] = [];
    Object.assign(services.bus, {
      sendOpenEvents: (pipeline: string, taskId: string) => order.push(`send ${pipeline}.${taskId}`),
    });
    const update = store.update.bind(store);
    store.update = (key, value, revision) => {
      order.push(`record ${value.status}`);
      return update(key, value, revision);
    };
    const final = services.finalEvents.failed(
      claimed.scope,
      'internal',
      'the workflow crashed',
      emptyUsage(),
      1,
    );
    const written = await recordFailure(services, claimed, lease, 1, final, {
      round: 1,
      usage: emptyUsage(),
    });
    expect(written).toBe(true);
    // Events a workflow made entering a state (its next step's start) are made by nothing once the record says failed.
    expect(order).toEqual([`send ${claimed.input.pipeline}.task-1`, 'record failed']);
  });

  it('writes its record over an earlier write of its own that landed unseen, rather than taking that one for it', async () => {
    const { services, store, lease, claimedRecord } = await claimedTask();
    // An earlier checkpoint of this delivery landed, but its reply never came (NATS out of reach past every retry):
    // the writer still holds the revision before it.
    const earlier: WorkflowRecord = { ...claimedRecord, state: 'plan', progress: 1 };
    await store.update('task-1', earlier, lease.revision);
    const final: WorkflowRecord = { ...claimedRecord, status: 'completed', state: 'completed', progress: 2 };
    const write = await fencedWrite(
      services,
      'task-1',
      { token: lease.token, revision: lease.revision },
      final,
    );
    const stored = await store.get('task-1');
    expect(stored?.value).toEqual(final);
    expect(write).toEqual({ written: true, revision: stored?.revision });
  });

  it('takes its own write whose reply was lost for written, without writing it again', async () => {
    const { services, store, lease, claimedRecord } = await claimedTask();
    const record: WorkflowRecord = { ...claimedRecord, state: 'plan', progress: 1 };
    // This very write landed; its reply was lost, so it is tried again at the revision before it.
    const landed = await store.update('task-1', record, lease.revision);
    const write = await fencedWrite(
      services,
      'task-1',
      { token: lease.token, revision: lease.revision },
      record,
    );
    expect(write).toEqual({ written: true, revision: landed });
    expect((await store.get('task-1'))?.revision).toBe(landed);
  });

  it("writes nothing over another coordinator's lease", async () => {
    const { services, store, lease, claimedRecord } = await claimedTask();
    await store.update('task-1', { ...claimedRecord, lease: 'another' }, lease.revision);
    const mine: WorkflowRecord = { ...claimedRecord, status: 'completed', state: 'completed', progress: 2 };
    const write = await fencedWrite(
      services,
      'task-1',
      { token: lease.token, revision: lease.revision },
      mine,
    );
    expect(write).toEqual({ written: false });
    expect((await store.get('task-1'))?.value.lease).toBe('another');
  });
});
