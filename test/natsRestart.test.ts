import { BUCKETS, WorkflowRecord } from '@troupe/protocol';
import { KvStore } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixturePath, type Harness, publishTask, startHarness } from './support/harness.ts';

describe('the NATS server restarting mid-run', () => {
  let h: Harness;

  beforeAll(async () => {
    h = await startHarness([fixturePath('slow.yaml')]);
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('loses no task: clients reconnect and every task still completes', async () => {
    const ids = Array.from({ length: 6 }, (_, i) => `restart-${i}`);
    const store = await KvStore.open(h.bus, BUCKETS.workflows, WorkflowRecord);
    for (const id of ids) publishTask(h, 'slow', { id, goal: `task ${id}` });
    await h.client.flush();
    // Their planners take 400 ms: restart the server (same port, same data) while those steps run.
    await new Promise((r) => setTimeout(r, 200));
    await h.nats.restart();
    // Outcomes are read from KV first: reads fail while the connection is down.
    const deadline = Date.now() + 45_000;
    let statuses: string[] = [];
    while (Date.now() < deadline) {
      // Reads fail while the connection is still down; the loop simply tries again.
      statuses = await Promise.all(
        ids.map(async (id) => (await store.get(id).catch(() => undefined))?.value.status ?? 'missing'),
      );
      if (statuses.every((s) => s !== 'running' && s !== 'missing')) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    expect(statuses).toEqual(ids.map(() => 'completed'));
    // Events published during the outage were held and sent after it: each task's final event arrives.
    for (const id of ids) {
      const final = await h.finalOf(id, 15_000);
      expect(final.kind).toBe('task.completed');
    }
  }, 60_000);
});
