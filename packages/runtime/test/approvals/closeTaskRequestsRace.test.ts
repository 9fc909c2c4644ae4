import type { HumanRequest } from '@troupe/protocol';
import { MemoryKv, SimulatedClock } from '@troupe/testkit';
import { describe, expect, it } from 'vitest';
import { closeTaskRequests } from '../../src/approvals/taskEnded.ts';
import { type KeyValue, underPrefix } from '../../src/durable/kvStore.ts';
import type { StepJournal } from '../../src/durable/stepJournal.ts';

const TIMEOUT_MS = 60_000;
const scope = { pipeline: 'p', taskId: 'task-1', agent: 'executor', stepId: 'task-1.build.1' };

describe('closing the pending requests of a task that ended', () => {
  it('closes a request whose record a hold or let-go changed between its read and its write', async () => {
    const clock = new SimulatedClock();
    const store = underPrefix(new MemoryKv<HumanRequest>(), scope.pipeline);
    const now = clock.now();
    const id = 'ap-1';
    const journal = { humanRequestsOf: async () => [id] } as unknown as StepJournal;
    const pending: HumanRequest = {
      id,
      kind: 'approval',
      prompt: 'writes a file',
      taskId: scope.taskId,
      pipeline: scope.pipeline,
      agent: scope.agent,
      stepId: scope.stepId,
      status: 'pending',
      requestedAt: new Date(now).toISOString(),
      expiresAt: new Date(now + TIMEOUT_MS).toISOString(),
    };
    await store.put(id, pending);
    // The coordinator's hold of the task's requests (its pause, recorded just before the task was cancelled) lands
    // between the close's read of the record and its write.
    let raced = false;
    const racing: KeyValue<HumanRequest> = {
      ...store,
      get: async (key) => {
        const entry = await store.get(key);
        if (!raced && entry) {
          raced = true;
          await store.update(
            key,
            { ...entry.value, held: { since: pending.requestedAt, leftMs: 1 } },
            entry.revision,
          );
        }
        return entry;
      },
    };
    await expect(
      closeTaskRequests(
        scope.taskId,
        { status: 'cancelled' },
        { journal, store: racing, now: () => clock.now() },
      ),
    ).resolves.toBe(1);
    expect(raced).toBe(true);
    const closed = (await store.get(id))?.value;
    expect(closed).toMatchObject({ status: 'closed', taskEnded: { status: 'cancelled' } });
    expect(closed?.held).toBeUndefined();
  });
});
