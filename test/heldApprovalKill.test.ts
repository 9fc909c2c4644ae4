import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pauseTask, replyToHuman, resumeTask } from '@troupe/client';
import { BUCKETS, HumanRequest } from '@troupe/protocol';
import { KvStore, underPrefix } from '@troupe/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, cliEnv, startTroupe } from './support/cli.ts';
import {
  fixturePath,
  type Harness,
  ofKind,
  publishTask,
  startHarness,
  waitUntil,
} from './support/harness.ts';

/**
 * An approval whose agent host is killed (SIGKILL) before its task is paused: nobody waits on it then, so only the
 * coordinator, which records the pause, can hold it. Resumed after the approval's first expiresAt, the task still has
 * it pending with the time it had left, and the person's decision is taken, not a deny by default.
 */
describe('an approval whose host was killed before the pause, over a real nats-server', () => {
  let h: Harness;
  let home: string;
  const workers: CliProcess[] = [];
  const worker = async () => {
    const args = ['worker', fixturePath('gatedkill.yaml'), '--server', h.nats.url, '--home', home];
    const p = startTroupe(args, cliEnv());
    workers.push(p);
    await p.waitFor(/troupe worker on .* serving/, 60_000);
    return p;
  };

  beforeAll(async () => {
    // Workflows here, agents in worker processes; a dead worker's step is noticed after 3 missed heartbeats of 1 s.
    h = await startHarness([fixturePath('gatedkill.yaml')], { hostAgents: false, stepHeartbeatMs: 1_000 });
    home = await mkdtemp(join(tmpdir(), 'troupe-held-kill-'));
  });
  afterAll(async () => {
    for (const p of workers) await p.stop('SIGKILL');
    await h?.stop();
    if (home) await rm(home, { recursive: true, force: true });
  });

  it('is held by the coordinator, and is still pending and answerable after a resume past its first expiresAt', async () => {
    const first = await worker();
    publishTask(h, 'gatedkill', { id: 'kill-ap', goal: 'release v1' });
    await waitUntil(
      () => ofKind(h.eventsOf('kill-ap'), 'approval.requested').length > 0,
      'the approval',
      30_000,
    );
    const id = ofKind(h.eventsOf('kill-ap'), 'approval.requested')[0]?.data.approvalId as string;
    await first.stop('SIGKILL');
    await pauseTask(h.bus, 'kill-ap', { by: 'ana' });
    const approvals = underPrefix(await KvStore.open(h.bus, BUCKETS.approvals, HumanRequest), 'gatedkill');
    await expect.poll(async () => (await approvals.get(id))?.value.held, { timeout: 5_000 }).toBeDefined();
    const held = (await approvals.get(id))?.value as HumanRequest;
    // Past the time it was asked for, the task still paused: it does not run out.
    await expect.poll(() => Date.now() > Date.parse(held.expiresAt), { timeout: 10_000 }).toBe(true);
    expect((await approvals.get(id))?.value.status).toBe('pending');
    // A worker for the step sent again on resume.
    await worker();
    await resumeTask(h.bus, 'kill-ap', { by: 'ana' });
    await expect.poll(async () => (await approvals.get(id))?.value.held, { timeout: 5_000 }).toBeUndefined();
    const outcome = await replyToHuman(h.bus, id, {
      kind: 'approval',
      decision: { decision: 'allow', by: 'bo' },
    });
    expect(outcome.status).toBe('allowed');
    const final = await h.finalOf('kill-ap', 30_000);
    expect(final.kind).toBe('task.completed');
    const decided = ofKind(h.eventsOf('kill-ap'), 'approval.decided');
    expect(decided.length).toBeGreaterThan(0);
    expect(decided.every((e) => e.data.decision === 'allow' && e.data.by === 'bo')).toBe(true);
    const written = ofKind(h.eventsOf('kill-ap'), 'tool.result').filter(
      (e) => e.data.callId === ofKind(h.eventsOf('kill-ap'), 'approval.requested')[0]?.data.callId,
    );
    expect(written.at(-1)?.data).toMatchObject({ ok: true, tool: 'write_file' });
  });
});
