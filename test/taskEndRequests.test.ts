import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BUCKETS, HumanRequest } from '@troupe/protocol';
import { KvStore, StepJournal } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, cliEnv, startTroupe, troupe } from './support/cli.ts';
import { fixturePath, found, type Harness, ofKind, publishTask, startHarness } from './support/harness.ts';

/**
 * A task whose step asked a person ends while the request is pending, and no agent host is left to close it (its
 * worker was killed): the task's end closes it, since its step never said it asked nobody.
 */
describe('a task ended while its step waits on a person whose worker is gone', () => {
  let h: Harness;
  let home: string;
  let worker: CliProcess | undefined;

  beforeAll(async () => {
    h = await startHarness([fixturePath('gated.yaml')], { hostAgents: false });
    home = await mkdtemp(join(tmpdir(), 'troupe-asked-'));
  });
  afterAll(async () => {
    await worker?.stop('SIGKILL');
    await h?.stop();
    await rm(home, { recursive: true, force: true });
  });

  it('has the pending request closed by the task’s end, saying how the task ended', async () => {
    const env = cliEnv({ NATS_URL: h.nats.url });
    worker = startTroupe(['worker', fixturePath('gated.yaml'), '--home', home, '--json'], env);
    await worker.waitFor(/serving gated/);
    publishTask(h, 'gated', { id: 'asked-then-ended', goal: 'release v1' });
    const requested = await found(
      () => ofKind(h.eventsOf('asked-then-ended'), 'approval.requested')[0],
      'the approval',
    );
    // Listed in the task's journal (as every run of the step lists what it asked) before the worker dies.
    const journal = (await StepJournal.open(h.bus)).forPipeline('gated');
    await expect
      .poll(() => journal.humanRequestsOf('asked-then-ended'), { timeout: 10_000 })
      .toEqual([requested.data.approvalId]);
    await worker.stop('SIGKILL');
    const approvals = await KvStore.open(h.bus, BUCKETS.approvals, HumanRequest);
    const record = async () => {
      for (const key of await approvals.keys()) {
        const found = (await approvals.get(key))?.value;
        if (found?.id === requested.data.approvalId) return found;
      }
      return undefined;
    };
    expect((await record())?.status).toBe('pending');

    expect((await troupe(['cancel', 'asked-then-ended'], env)).code).toBe(0);
    expect((await h.finalOf('asked-then-ended')).kind).toBe('task.cancelled');
    await expect
      .poll(async () => {
        const closed = await record();
        return [closed?.status, closed?.taskEnded];
      })
      .toEqual(['closed', { status: 'cancelled' }]);
  });
});
