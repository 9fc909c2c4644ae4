import { emptyUsage, type WorkflowRecord } from '@troupe/protocol';
import { TransportError } from '@troupe/runtime';
import { describe, expect, it } from 'vitest';
import { ok, paused, setUp, startRunner, twoSteps } from './support/steeringRunner.ts';

/**
 * A sub-task its parent paused, whose coordinator was down when the parent was resumed: the parent's resume, tried a
 * while over the sub-task's control subject, reached nobody. The coordinator that takes the sub-task up again finds it
 * held by its parent's pause, reads its parent's record, and lets itself go when the parent runs unpaused.
 */
describe('a sub-task restored held', () => {
  const parentId = 'parent-1';
  const parent = { taskId: parentId, pipeline: 'unit', step: 'sub', depth: 1 };
  const byParent = { by: `task ${parentId}`, reason: `its parent task ${parentId} was paused` };
  /** The parent's record, running at its `pipeline` step. */
  const parentAt = (now: string): WorkflowRecord => ({
    taskId: parentId,
    pipeline: 'unit',
    streamSequence: 1,
    status: 'running',
    state: 'sub',
    goal: 'outline it',
    round: 1,
    usage: emptyUsage(),
    createdAt: now,
    updatedAt: now,
  });

  /** The sub-task at its first step, paused by `pause`, its coordinator stopped; the parent's record as `parentPaused`. */
  async function heldThenStopped(subId: string, pause: Record<string, unknown>) {
    const first = await setUp(twoSteps);
    const now = new Date(first.clock.now()).toISOString();
    const parentRecord: WorkflowRecord = { ...parentAt(now), paused: { since: now, by: 'ann' } };
    await first.store.put(parentId, parentRecord);
    const task = first.intake.deliver({ id: subId, goal: 'outline it', parent });
    const plan = await first.next(`${subId}.plan.1`);
    await first.control(subId, { action: 'pause', ...pause });
    paused(plan);
    await first.bus.settled();
    // Its coordinator goes down, the sub-task held in its record.
    await first.runner.stop();
    await task.handled;
    expect((await first.record(subId))?.paused).toMatchObject(pause.by === undefined ? {} : { by: pause.by });
    /** Takes the sub-task up on another coordinator, as the redelivery of its message does. */
    const restore = async () => {
      const lease = (await first.record(subId))?.lease;
      const { intake } = await startRunner(first, twoSteps);
      const again = intake.deliver(
        { id: subId, goal: 'outline it', parent },
        { streamSequence: task.delivery.streamSequence, deliveryCount: 2 },
      );
      await expect.poll(async () => (await first.record(subId))?.lease).not.toBe(lease);
      // Restored held: its pause is published again, with the id it had.
      await expect.poll(() => first.bus.eventsOf('task.paused').length).toBeGreaterThan(1);
      return again;
    };
    /** The parent resumed while the sub-task's coordinator was down: its record says so. */
    const resumeParent = async () => {
      const { paused: _paused, ...running } = parentRecord;
      await first.store.put(parentId, { ...running, pausedMs: 1_000 });
    };
    return { ...first, restore, resumeParent };
  }

  it("lets itself go when its parent's record says the parent runs, no longer paused", async () => {
    const { restore, resumeParent, next, record, bus } = await heldThenStopped('sub-1', byParent);
    await resumeParent();
    const again = await restore();
    // Sent again under the same step id, without anybody sending the sub-task a resume.
    ok(await next('sub-1.plan.1'));
    ok(await next('sub-1.build.1'));
    await again.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
    expect(bus.eventsOf('task.resumed').filter((e) => e.data.after === 'pause')[0]?.data).toMatchObject({
      by: `task ${parentId}`,
    });
    expect((await record('sub-1'))?.paused).toBeUndefined();
  });

  it('stays held while its parent is still paused, and goes on with the resume its parent sends then', async () => {
    const { restore, next, waiting, control, record, bus } = await heldThenStopped('sub-2', byParent);
    const again = await restore();
    await bus.settled();
    expect(waiting).toHaveLength(0);
    expect((await record('sub-2'))?.paused).toMatchObject({ by: `task ${parentId}` });
    await control('sub-2', { action: 'resume', by: `task ${parentId}` });
    ok(await next('sub-2.plan.1'));
    ok(await next('sub-2.build.1'));
    await again.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
  });

  it('a person paused stays paused, through a restore and through its parent’s resume, until the person resumes it', async () => {
    const { restore, resumeParent, next, waiting, control, record, bus } = await heldThenStopped('sub-3', {
      by: 'ann',
    });
    await resumeParent();
    const again = await restore();
    await bus.settled();
    expect(waiting).toHaveLength(0);
    expect((await record('sub-3'))?.paused).toMatchObject({ by: 'ann' });
    // A restored parent sends its sub-task a resume: it lets go of no pause a person made.
    await expect(control('sub-3', { action: 'resume', by: `task ${parentId}` })).rejects.toSatisfy(
      (error) => TransportError.is(error, 'not_paused') && /paused by ann/.test(String(error)),
    );
    await bus.settled();
    expect(waiting).toHaveLength(0);
    expect((await record('sub-3'))?.paused).toMatchObject({ by: 'ann' });
    await control('sub-3', { action: 'resume', by: 'ann' });
    ok(await next('sub-3.plan.1'));
    ok(await next('sub-3.build.1'));
    await again.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
  });

  it("holds itself when restored running while its parent's record says the parent is paused", async () => {
    // The parent's forwarded pause reached nobody: the sub-task's coordinator was down, its step at work.
    const first = await setUp(twoSteps);
    const now = new Date(first.clock.now()).toISOString();
    const parentRecord = parentAt(now);
    await first.store.put(parentId, parentRecord);
    const task = first.intake.deliver({ id: 'sub-4', goal: 'outline it', parent });
    await first.next('sub-4.plan.1');
    await first.runner.stop();
    await task.handled;
    await first.store.put(parentId, { ...parentRecord, paused: { since: now, by: 'ann' } });
    const lease = (await first.record('sub-4'))?.lease;
    const { intake } = await startRunner(first, twoSteps);
    const again = intake.deliver(
      { id: 'sub-4', goal: 'outline it', parent },
      { streamSequence: task.delivery.streamSequence, deliveryCount: 2 },
    );
    await expect.poll(async () => (await first.record('sub-4'))?.lease).not.toBe(lease);
    await expect.poll(async () => (await first.record('sub-4'))?.paused).toMatchObject(byParent);
    // The step sent again as the sub-task was restored stops for the pause at its next call; none goes after it.
    paused(await first.next('sub-4.plan.1'));
    await first.bus.settled();
    expect(first.waiting).toHaveLength(0);
    // The parent's resume, once it comes, lets it go on.
    await first.control('sub-4', { action: 'resume', by: `task ${parentId}` });
    ok(await first.next('sub-4.plan.1'));
    ok(await first.next('sub-4.build.1'));
    await again.handled;
    expect(first.bus.eventsOf('task.completed')).toHaveLength(1);
  });

  it('restored running, goes on when its parent is resumed between its read of the parent’s record and its pause', async () => {
    // The parent's record said paused when read; the parent was resumed and its forwarded resume found the sub-task
    // not paused yet (not_paused, which ends the forward), before the sub-task's own pause took hold.
    const first = await setUp(twoSteps);
    const now = new Date(first.clock.now()).toISOString();
    const parentRecord = parentAt(now);
    await first.store.put(parentId, parentRecord);
    const task = first.intake.deliver({ id: 'sub-6', goal: 'outline it', parent });
    await first.next('sub-6.plan.1');
    await first.runner.stop();
    await task.handled;
    await first.store.put(parentId, { ...parentRecord, paused: { since: now, by: 'ann' } });
    const get = first.store.get.bind(first.store);
    let reads = 0;
    let forwarded: unknown;
    first.store.get = async (key: string) => {
      const found = await get(key);
      // The second read of the parent's record is the restored sub-task's (its claim's asks if the parent ended).
      if (key !== parentId || ++reads !== 2) return found;
      await first.store.put(parentId, { ...parentRecord, pausedMs: 1_000 });
      forwarded = await first.control('sub-6', { action: 'resume', by: `task ${parentId}` }).catch((e) => e);
      return found;
    };
    const { intake } = await startRunner(first, twoSteps);
    const again = intake.deliver(
      { id: 'sub-6', goal: 'outline it', parent },
      { streamSequence: task.delivery.streamSequence, deliveryCount: 2 },
    );
    await expect.poll(() => forwarded).toBeDefined();
    expect(TransportError.is(forwarded, 'not_paused')).toBe(true);
    await expect.poll(() => first.bus.eventsOf('task.paused').length).toBe(1);
    // Its own pause came after the parent's resume: it reads the parent's record again, and lets itself go.
    await expect
      .poll(() => first.bus.eventsOf('task.resumed').filter((e) => e.data.after === 'pause').length)
      .toBe(1);
    expect((await first.record('sub-6'))?.paused).toBeUndefined();
    // The step sent again as it was restored was never stopped: it goes on.
    ok(await first.next('sub-6.plan.1'));
    ok(await first.next('sub-6.build.1'));
    await again.handled;
    expect(first.bus.eventsOf('task.completed')).toHaveLength(1);
  });

  it('is held by a person who pauses it while its parent holds it: the parent’s resume then lets it go no more', async () => {
    const { intake, next, control, record, waiting, bus } = await setUp(twoSteps);
    const task = intake.deliver({ id: 'sub-5', goal: 'outline it', parent });
    const plan = await next('sub-5.plan.1');
    await control('sub-5', { action: 'pause', ...byParent });
    paused(plan);
    await expect(
      control('sub-5', { action: 'pause', by: 'ann', reason: 'checking it' }),
    ).resolves.toMatchObject({
      ok: true,
      outcome: 'paused',
    });
    expect((await record('sub-5'))?.paused).toMatchObject({ by: 'ann', reason: 'checking it' });
    await expect(control('sub-5', { action: 'resume', by: `task ${parentId}` })).rejects.toSatisfy(
      (error) => TransportError.is(error, 'not_paused') && /paused by ann/.test(String(error)),
    );
    await bus.settled();
    expect(waiting).toHaveLength(0);
    await control('sub-5', { action: 'resume', by: 'ann' });
    ok(await next('sub-5.plan.1'));
    ok(await next('sub-5.build.1'));
    await task.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
  });

  it('goes on with its running parent when a person’s pause of it, made while its parent held it, cannot be recorded', async () => {
    const { intake, next, control, record, store, bus } = await setUp(twoSteps);
    const now = new Date(0).toISOString();
    await store.put(parentId, parentAt(now));
    const task = intake.deliver({ id: 'sub-7', goal: 'outline it', parent });
    const plan = await next('sub-7.plan.1');
    await control('sub-7', { action: 'pause', ...byParent });
    paused(plan);
    await bus.settled();
    const update = store.update.bind(store);
    let release: () => void = () => {};
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let refuse = true;
    store.update = async (...args: Parameters<typeof store.update>) => {
      if (refuse) {
        refuse = false;
        await gate;
        throw new Error('the store refused it');
      }
      return update(...args);
    };
    const pausing = control('sub-7', { action: 'pause', by: 'ann' }).catch((error) => error);
    await bus.settled();
    // The parent is resumed meanwhile: its forwarded resume finds the pause ann's, and stops there.
    await expect(control('sub-7', { action: 'resume', by: `task ${parentId}` })).rejects.toSatisfy(
      (error) => TransportError.is(error, 'not_paused') && /paused by ann/.test(String(error)),
    );
    release();
    expect(TransportError.is(await pausing, 'not_running')).toBe(true);
    // Nothing was changed by ann, and nothing holds the sub-task now its parent runs: it goes on.
    await expect.poll(async () => (await record('sub-7'))?.paused).toBeUndefined();
    ok(await next('sub-7.plan.1'));
    ok(await next('sub-7.build.1'));
    await task.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
  });
});
