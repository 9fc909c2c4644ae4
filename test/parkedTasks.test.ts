import { BUCKETS, WorkflowRecord } from '@troupe/protocol';
import { KvStore } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixturePath, type Harness, ofKind, publishTask, startHarness } from './support/harness.ts';

describe('tasks waiting on a slow model', () => {
  let h: Harness;
  beforeAll(async () => {
    // One working slot; the model answers after 5 s; the host reports the wait once a call has lasted 100 ms.
    h = await startHarness([fixturePath('parked.yaml')], { concurrency: 1 });
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('park and free their working slot: every task starts while the first still waits, and all complete', async () => {
    const ids = ['parked-1', 'parked-2', 'parked-3', 'parked-4'];
    for (const id of ids) publishTask(h, 'parked', { id, goal: 'think it over' });
    const started = () => ofKind(h.events, 'step.started').map((e) => e.taskId);
    const ended = () => h.events.filter((e) => e.kind === 'task.completed' || e.kind === 'task.failed');
    await expect
      .poll(() => started().length >= ids.length || ended().length > 0, { timeout: 30_000 })
      .toBe(true);
    // With the slot held while waiting, the second task could start only once the first had ended.
    expect(ended()).toEqual([]);
    expect(new Set(started())).toEqual(new Set(ids));

    // What the task does meanwhile is on its record, for troupe status.
    const workflows = await KvStore.open(h.bus, BUCKETS.workflows, WorkflowRecord);
    await expect
      .poll(async () => (await workflows.get('parked-4'))?.value.activity, { timeout: 10_000 })
      .toMatchObject({ kind: 'model', step: 'think', agent: 'thinker' });

    for (const id of ids) {
      const final = await h.finalOf(id, 60_000);
      expect(final).toMatchObject({ kind: 'task.completed', data: { output: 'Thought it over.' } });
    }
  }, 90_000);

  it('record what the step does from the claim on, and each change once', async () => {
    type Written = { status: string; state: string; snapshot?: unknown; activity?: { kind: string } };
    const written: Written[] = [];
    const watch = h.client.subscribe('$KV.workflows.recorded-1', {
      callback: (_e, msg) => void written.push(msg.json()),
    });
    await h.client.flush();
    publishTask(h, 'parked', { id: 'recorded-1', goal: 'think it over' });
    expect(await h.finalOf('recorded-1', 60_000)).toMatchObject({ kind: 'task.completed' });
    await expect.poll(() => written.at(-1)?.status, { timeout: 10_000 }).toBe('completed');
    watch.unsubscribe();
    // The claim comes first and says the first step's agent works on it: the checkpoint entering that step would add
    // only the snapshot, so it is not written, and the first heartbeat has nothing to write either.
    expect(written[0]).toMatchObject({
      status: 'running',
      activity: { kind: 'agent', step: 'think', agent: 'thinker' },
    });
    expect(written[0]?.snapshot).toBeUndefined();
    const running = written.filter((r) => r.status === 'running');
    // Then the model wait, and work again when it ends: each change written once. The step's reply may reach the
    // workflow before the news that the model answered (a loaded machine), which then has nothing left to change.
    const kinds = running.map((r) => r.activity?.kind);
    expect(kinds.slice(0, 2)).toEqual(['agent', 'model']);
    expect(kinds.slice(2)).toEqual(kinds.length > 2 ? ['agent'] : []);
  }, 60_000);
});
