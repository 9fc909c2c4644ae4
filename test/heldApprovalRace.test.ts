import { replyToHuman } from '@troupe/client';
import { BUCKETS, HumanRequest } from '@troupe/protocol';
import { KvStore, underPrefix } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { fixturePath, type Harness, startHarness } from './support/harness.ts';

describe("a person's reply racing the asker's hold or let-go write, over a real nats-server", () => {
  let h: Harness;

  beforeAll(async () => {
    h = await startHarness([fixturePath('gated.yaml')]);
  });
  afterAll(async () => {
    vi.restoreAllMocks();
    await h?.stop();
  });

  it('is recorded, not refused as decided meanwhile, when the record moved on still pending', async () => {
    const approvals = underPrefix(await KvStore.open(h.bus, BUCKETS.approvals, HumanRequest), 'gated');
    const now = Date.now();
    const pending: HumanRequest = {
      id: 'ap-heldrace1',
      kind: 'approval',
      taskId: 'held-race',
      pipeline: 'gated',
      agent: 'writer',
      stepId: 'held-race.write',
      tool: 'write_file',
      prompt: 'release',
      status: 'pending',
      requestedAt: new Date(now).toISOString(),
      expiresAt: new Date(now + 60_000).toISOString(),
    };
    await approvals.put(pending.id, pending);
    // The asker's hold (its task paused) lands between the reply's read of the record and its write.
    const update = KvStore.prototype.update;
    // Only the reply's first write to this record races (the harness's own processes write other keys meanwhile).
    let raced = false;
    const spy = vi.spyOn(KvStore.prototype, 'update').mockImplementation(async function (
      this: KvStore<typeof HumanRequest>,
      key,
      value,
      revision,
    ) {
      if (!raced && key === `gated.${pending.id}`) {
        raced = true;
        await approvals.put(pending.id, {
          ...pending,
          held: { since: new Date(now).toISOString(), leftMs: 60_000 },
        });
      }
      return update.call(this, key, value, revision);
    });
    const outcome = await replyToHuman(h.bus, pending.id, {
      kind: 'approval',
      decision: { decision: 'allow', by: 'bo' },
    });
    spy.mockRestore();
    expect(raced).toBe(true);
    expect(outcome.status).toBe('allowed');
    const decided = (await approvals.get(pending.id))?.value;
    expect(decided).toMatchObject({ status: 'allowed', by: 'bo' });
    // Decided, it is no longer held: nothing is left to run out, and the asker's let-go loses to the decision.
    expect(decided?.held).toBeUndefined();
  });
});
