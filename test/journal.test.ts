import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { jetstream } from '@nats-io/jetstream';
import { readTaskEvents } from '@troupe/client';
import { STREAMS, subjects, type TroupeEvent } from '@troupe/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  eventOf,
  eventsInMessage,
  fixturePath,
  type Harness,
  ofKind,
  publishTask,
  startHarness,
  startSecondCoordinator,
} from './support/harness.ts';

describe('the tool-call journal', () => {
  let h: Harness;

  beforeAll(async () => {
    // EVENTS stores each fact once with events sent alone; in batches, a resumed step may group its replayed facts
    // otherwise, and readers de-duplicate them (test/eventBatches.test.ts).
    h = await startHarness([fixturePath('ledger.yaml')], { eventBatch: false });
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('lets a step that runs again after a restart meet its earlier calls instead of repeating them', async () => {
    publishTask(h, 'ledger', { id: 'ledger-1', goal: 'record one entry' });
    await eventOf(h, 'ledger-1', 'tool.result');
    // The side effect happened; the step has not finished. The coordinator goes away.
    await h.coordinator.stop();

    const second = await startSecondCoordinator(h, ['ledger.yaml'], { eventBatch: false });
    try {
      expect((await h.finalOf('ledger-1', 30_000)).kind).toBe('task.completed');
      const results = ofKind(h.eventsOf('ledger-1'), 'tool.result');
      expect(results.map((r) => r.data.journaled ?? false)).toEqual([false, true]);
      expect(results[1]?.data.output).toBe(results[0]?.data.output);
      const ledger = await readFile(join(h.workspaceRoot, 'ledger', 'ledger-1', 'ledger.txt'), 'utf8');
      expect(ledger).toBe('entry\n');
      // Live subscribers saw the resumed step publish its first turn and call again; the EVENTS stream stored
      // each of those facts once, the republished copies having the same ids.
      expect(ofKind(h.eventsOf('ledger-1'), 'tool.call')).toHaveLength(2);
      const stored = await storedEvents(h, 'ledger-1');
      const facts = stored.map((e) => `${e.kind} ${JSON.stringify([e.data])}`);
      expect(stored.filter((e) => e.kind === 'tool.call')).toHaveLength(1);
      expect(stored.filter((e) => e.kind === 'step.started')).toHaveLength(1);
      expect(new Set(stored.map((e) => e.id)).size, facts.join('\n')).toBe(stored.length);
    } finally {
      await second.stop();
    }
  });
});

describe('the tool-call journal, with events in batches (the default)', () => {
  let h: Harness;

  beforeAll(async () => {
    h = await startHarness([fixturePath('ledger.yaml')]);
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('has a reader see each fact of a step run again once, though its replayed events came in other batches', async () => {
    publishTask(h, 'ledger', { id: 'ledger-b', goal: 'record one entry' });
    await eventOf(h, 'ledger-b', 'tool.result');
    await h.coordinator.stop();

    const second = await startSecondCoordinator(h, ['ledger.yaml']);
    try {
      expect((await h.finalOf('ledger-b', 30_000)).kind).toBe('task.completed');
      const ledger = await readFile(join(h.workspaceRoot, 'ledger', 'ledger-b', 'ledger.txt'), 'utf8');
      expect(ledger).toBe('entry\n');
      // What `troupe logs` and the gateway read: each fact once, the replayed copies dropped by id.
      const read = await readTaskEvents(h.bus, 'ledger-b', 'ledger');
      expect(read.filter((e) => e.kind === 'tool.call')).toHaveLength(1);
      expect(read.filter((e) => e.kind === 'step.started')).toHaveLength(1);
      expect(read.filter((e) => e.kind === 'tool.result').map((e) => e.data.journaled ?? false)).toEqual([
        false,
      ]);
      expect(new Set(read.map((e) => e.id)).size).toBe(read.length);
      expect(read.at(-1)?.kind).toBe('task.completed');
    } finally {
      await second.stop();
    }
  });
});

/** Every event of a task the `EVENTS` stream stored, in order. */
async function storedEvents(h: Harness, taskId: string): Promise<TroupeEvent[]> {
  const js = jetstream(h.client);
  const consumer = await js.consumers.get(STREAMS.events, { filter_subjects: subjects.taskEvents(taskId) });
  const events: TroupeEvent[] = [];
  const pending = (await consumer.info()).num_pending;
  for (let read = 0; read < pending; read++) {
    const msg = await consumer.next({ expires: 5_000 });
    if (!msg) break;
    events.push(...eventsInMessage(msg));
  }
  return events;
}
