import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  eventOf,
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
    h = await startHarness([fixturePath('ledger.yaml')]);
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('lets a step that runs again after a restart meet its earlier calls instead of repeating them', async () => {
    publishTask(h, 'ledger', { id: 'ledger-1', goal: 'record one entry' });
    await eventOf(h, 'ledger-1', 'tool.result');
    // The side effect happened; the step has not finished. The coordinator goes away.
    await h.coordinator.stop();

    const second = await startSecondCoordinator(h, ['ledger.yaml']);
    try {
      expect((await h.finalOf('ledger-1', 30_000)).kind).toBe('task.completed');
      const results = ofKind(h.eventsOf('ledger-1'), 'tool.result');
      expect(results.map((r) => r.data.journaled ?? false)).toEqual([false, true]);
      expect(results[1]?.data.output).toBe(results[0]?.data.output);
      const ledger = await readFile(join(h.workspaceRoot, 'ledger', 'ledger-1', 'ledger.txt'), 'utf8');
      expect(ledger).toBe('entry\n');
    } finally {
      await second.stop();
    }
  });
});
