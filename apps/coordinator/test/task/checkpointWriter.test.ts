import type { StepActivity, WorkflowRecord } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { createActor } from 'xstate';
import { claim } from '../../src/intake/claim.ts';
import {
  CheckpointWriter,
  type CheckpointWriterEvent,
  checkpointLingerOf,
  DEFAULT_CHECKPOINT_LINGER_MS,
} from '../../src/task/checkpointWriter.ts';
import { TaskSteering } from '../../src/task/taskSteering.ts';
import type { WorkflowSnapshot } from '../../src/task/workflowChild.ts';
import { intakeServices, triagedTask } from '../intake/taskServices.ts';

const activity: StepActivity = {
  kind: 'person',
  step: 'plan',
  agent: 'planner',
  request: { kind: 'question', id: 'q1' },
  since: '2026-01-01T00:00:00.000Z',
};

/** Lets every write the writer would start now reach the store (its sends and reads go through a few turns). */
function turnsPass(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** What a promise of the writer settled with, as it does: empty until it has. */
function settled(promise: Promise<boolean>): boolean[] {
  const seen: boolean[] = [];
  void promise.then((stored) => seen.push(stored));
  return seen;
}

/** A claimed task and its writer, whose store's writes wait until let through (`release`), one call at a time. */
async function writerOf(
  options: {
    park?: (parked: boolean) => void;
    steering?: TaskSteering;
    /** The bus's sending of a task's open batch of events. */
    sendOpenEvents?: (pipeline: string, taskId: string) => void;
    /** What each write of the record adds to, as it is sent. */
    order?: string[];
    /** The runner's `checkpointLingerMs`. */
    lingerMs?: number;
  } = {},
) {
  const { services, store, clock } = intakeServices();
  if (options.lingerMs !== undefined) Object.assign(services, { checkpointLingerMs: options.lingerMs });
  const claimed = await claim(services, triagedTask({ id: 'task-1', goal: 'plan it' }));
  if (claimed.next !== 'run') throw new Error(`claimed as ${claimed.next}`);
  if (options.sendOpenEvents) Object.assign(services.bus, { sendOpenEvents: options.sendOpenEvents });
  if (options.park) claimed.claimed.delivery.park = options.park;
  const update = store.update.bind(store);
  const calls: { revision: number; record: WorkflowRecord }[] = [];
  const gates: (() => void)[] = [];
  let failNext: Error | undefined;
  store.update = async (key, value, revision) => {
    calls.push({ revision, record: value });
    options.order?.push(`record (progress ${value.progress})`);
    await new Promise<void>((resolve) => gates.push(resolve));
    const failure = failNext;
    failNext = undefined;
    if (failure) throw failure;
    return update(key, value, revision);
  };
  const told: CheckpointWriterEvent[] = [];
  const checkpoints: boolean[] = [];
  const writer = new CheckpointWriter(
    services,
    claimed.claimed,
    claimed.flow,
    (event) => told.push(event),
    // As the task actor does: a checkpoint parks or unparks the task.
    (_snapshot, { parked }) => {
      checkpoints.push(parked);
      claimed.claimed.delivery.park(parked);
    },
    options.steering,
  );
  // The workflow's first snapshot, not started: what a checkpoint is made of, with no step running.
  const snapshot: WorkflowSnapshot = createActor(claimed.flow.machine, {
    input: claimed.claimed.input,
  }).getSnapshot();
  return {
    store,
    writer,
    snapshot,
    calls,
    told,
    checkpoints,
    claimed: claimed.claimed,
    lease: claimed.claimed.lease,
    clock,
    /** Lets the oldest waiting write through, once it has been tried. */
    release: async () => {
      await expect.poll(() => gates.length).toBeGreaterThan(0);
      gates.shift()?.();
    },
    failNext: (error: Error) => {
      failNext = error;
    },
  };
}

describe("a task's checkpoint writer", () => {
  it('writes one record at a time, in order, each at the revision the one before left, and says when all are written', async () => {
    const { store, writer, snapshot, calls, told, checkpoints, release, lease } = await writerOf();
    // Entering the first step: the claim's record says so already, so nothing is written for it.
    writer.snapshot(snapshot);
    writer.snapshot(snapshot);
    await expect.poll(() => calls.length).toBe(1);
    // The first write is in flight: the next one waits its turn.
    writer.snapshot(snapshot);
    await release();
    await expect.poll(() => calls.length).toBe(2);
    writer.activity(activity);
    await release();
    await expect.poll(() => calls.length).toBe(3);
    const written = writer.written();
    await release();
    const done = await written;
    expect(calls.map((c) => c.revision)).toEqual([lease.revision, lease.revision + 1, lease.revision + 2]);
    // Each later checkpoint records a transition; the activity note adds to the last.
    expect(calls.map((c) => c.record.progress)).toEqual([1, 2, 2]);
    expect(calls[2]?.record.activity).toEqual(activity);
    expect(done).toMatchObject({
      revision: lease.revision + 3,
      progress: 2,
      lost: false,
      finalWritten: false,
    });
    expect((await store.get('task-1'))?.revision).toBe(done.revision);
    expect(told).toEqual([]);
    // Its step at work is an agent's: the task keeps its working slot.
    expect(checkpoints).toEqual([false, false, false]);
  });

  it('writes only the newest of the records queued behind a write in flight, and answers each steering change it holds', async () => {
    const steering = new TaskSteering();
    const { writer, snapshot, calls, release } = await writerOf({ steering });
    writer.snapshot(snapshot);
    writer.snapshot(snapshot);
    await expect.poll(() => calls.length).toBe(1);
    // Meanwhile the workflow goes two transitions on, its step says what it does, and a person tells the task.
    writer.snapshot(snapshot);
    writer.snapshot(snapshot);
    writer.activity(activity);
    steering.tell('hello', '2026-01-01T00:00:00.000Z');
    const told = writer.steered();
    const all = writer.stored();
    await release();
    await expect.poll(() => calls.length).toBe(2);
    await release();
    expect(await told).toBe(true);
    expect(await all).toBe(true);
    // One write for the four: the last record made, which holds them all.
    expect(calls.map((c) => c.record.progress)).toEqual([1, 3]);
    expect(calls[1]?.record).toMatchObject({ activity, toldCount: 1 });
  });

  it('writes every record queued behind a write in flight, one by one, with a linger of 0', async () => {
    const { writer, snapshot, calls, release } = await writerOf({ lingerMs: 0 });
    writer.snapshot(snapshot);
    writer.snapshot(snapshot);
    await expect.poll(() => calls.length).toBe(1);
    writer.snapshot(snapshot);
    writer.snapshot(snapshot);
    const all = writer.stored();
    await release();
    await release();
    await release();
    expect(await all).toBe(true);
    expect(calls.map((c) => c.record.progress)).toEqual([1, 2, 3]);
  });

  it('writes a snapshot’s record only once the workflow is through with the turn that took it', async () => {
    const order: string[] = [];
    const { writer, snapshot, release } = await writerOf({
      order,
      sendOpenEvents: () => order.push('open events sent'),
    });
    writer.snapshot(snapshot);
    // The workflow takes a snapshot holding a foreach item it just started, then, in the same turn, says the item's
    // first events: they are gathered before the record is sent.
    writer.snapshot(snapshot);
    order.push('the item’s events');
    await release();
    expect(order).toEqual(['the item’s events', 'open events sent', 'record (progress 1)']);
  });

  it('sends the task’s open batch of events before each write of its record, on the same wire, the others’ left open', async () => {
    const order: string[] = [];
    // The bus faked: each task's events gather in an open batch, which goes (recorded in send order, with the record
    // writes) when the bus is asked to send it.
    const open = new Map<string, string[]>();
    const bus = {
      sendOpenEvents: (pipeline: string, taskId: string) => {
        const events = open.get(`${pipeline}.${taskId}`);
        open.delete(`${pipeline}.${taskId}`);
        if (events) order.push(`events ${events.join(',')}`);
      },
    };
    const { writer, snapshot, release } = await writerOf({
      order,
      sendOpenEvents: bus.sendOpenEvents,
    });
    const add = (taskId: string, kind: string) =>
      open.set(`unit.${taskId}`, [...(open.get(`unit.${taskId}`) ?? []), `${taskId}:${kind}`]);
    writer.snapshot(snapshot);
    // A step ends; the workflow enters the next one, saying so; its checkpoint records the state entered.
    add('task-1', 'step.completed');
    add('task-2', 'tool.call');
    add('task-1', 'agent.handoff');
    add('task-1', 'step.started');
    writer.snapshot(snapshot);
    await release();
    add('task-1', 'route.chosen');
    writer.snapshot(snapshot);
    const written = writer.written();
    await release();
    await written;
    expect(order).toEqual([
      'events task-1:step.completed,task-1:agent.handoff,task-1:step.started',
      'record (progress 1)',
      'events task-1:route.chosen',
      'record (progress 2)',
    ]);
    // Another task's batch is left to its linger.
    expect(open.get('unit.task-2')).toEqual(['task-2:tool.call']);
  });

  it('tells the task once that the lease is lost, and writes nothing after it', async () => {
    const { store, writer, snapshot, calls, told, release } = await writerOf();
    const current = await store.get('task-1');
    // Another coordinator takes the task over.
    await store.put('task-1', { ...(current?.value as WorkflowRecord), lease: 'another' });
    writer.snapshot(snapshot);
    writer.snapshot(snapshot);
    await release();
    await expect.poll(() => told).toEqual([{ type: 'lease.lost' }]);
    writer.snapshot(snapshot);
    expect(await writer.written()).toMatchObject({ lost: true });
    expect(calls).toHaveLength(1);
    expect((await store.get('task-1'))?.value.lease).toBe('another');
  });

  it('fails the task on a checkpoint it cannot store, but only logs a lost activity note and goes on', async () => {
    const { writer, snapshot, calls, told, release, failNext } = await writerOf();
    writer.snapshot(snapshot);
    writer.snapshot(snapshot);
    await expect.poll(() => calls.length).toBe(1);
    writer.snapshot(snapshot);
    await release();
    failNext(new Error('value too large'));
    await release();
    await expect
      .poll(() => told)
      .toEqual([{ type: 'checkpoint.poisoned', error: new Error('value too large') }]);
    writer.activity(activity);
    failNext(new Error('value too large'));
    await release();
    expect(await writer.written()).toMatchObject({ lost: false });
    expect(calls).toHaveLength(3);
    expect(told).toHaveLength(1);
  });

  it('tells a fault of ours while hearing the workflow to the task actor, never throwing it at the workflow', async () => {
    const { writer, snapshot, told, calls, lease } = await writerOf({
      park: () => {
        throw new Error('a bug of ours');
      },
    });
    expect(() => writer.snapshot(snapshot)).not.toThrow();
    expect(told).toEqual([{ type: 'writer.failed', error: new Error('a bug of ours') }]);
    // The task actor fails with it: the writer hears nothing more, and writes nothing more.
    expect(() => writer.activity(activity)).not.toThrow();
    expect(told).toHaveLength(1);
    expect(await writer.written()).toMatchObject({ revision: lease.revision });
    expect(calls).toHaveLength(0);
  });

  it('writes the final checkpoint queued behind a write in flight before the ending is recorded, and nothing after it', async () => {
    const { store, writer, snapshot, calls, told, release } = await writerOf();
    writer.snapshot(snapshot);
    writer.snapshot(snapshot);
    await expect.poll(() => calls.length).toBe(1);
    // The workflow completes while its last checkpoint is being written: the done snapshot waits its turn.
    const usage = snapshot.context.usage;
    const done = {
      ...snapshot,
      status: 'done',
      output: {
        status: 'completed',
        output: 'planned',
        approved: undefined,
        rounds: 1,
        usage,
        usageByAgent: {},
      },
    } as WorkflowSnapshot;
    writer.snapshot(done);
    // The task actor hears the workflow is done and waits for every write before recording the ending.
    const written = writer.written();
    await release();
    await release();
    const ending = await written;
    expect(calls.map((c) => c.record.status)).toEqual(['running', 'completed']);
    expect(ending).toMatchObject({ finalWritten: true, lost: false, final: { kind: 'task.completed' } });
    const stored = await store.get('task-1');
    expect(stored).toMatchObject({ revision: ending.revision, value: { status: 'completed' } });
    expect(stored?.value.final).toEqual(ending.final);
    // A report or snapshot that comes late rewrites nothing over the ending.
    writer.activity(activity);
    writer.snapshot(snapshot);
    expect(calls).toHaveLength(2);
    expect(told).toEqual([]);
  });

  it('hears nothing more once the workflow has ended and tells the task nothing after', async () => {
    const { writer, snapshot, calls } = await writerOf();
    expect(await writer.written()).toMatchObject({ lost: false, finalWritten: false });
    writer.snapshot(snapshot);
    writer.activity(activity);
    expect(calls).toEqual([]);
  });

  it('answers a pause made before the first checkpoint once that checkpoint, which holds it, is written; a resume writes it gone', async () => {
    const steering = new TaskSteering();
    const parks: boolean[] = [];
    const { writer, snapshot, calls, release } = await writerOf({ steering, park: (p) => parks.push(p) });
    steering.pause(Date.parse('2026-01-01T00:00:00.000Z'), 'ann', 'wrong way');
    let answered: boolean | undefined;
    void writer.steered().then((written) => (answered = written));
    expect(parks).toEqual([true]);
    writer.snapshot(snapshot);
    await release();
    await expect.poll(() => answered).toBe(true);
    expect(calls[0]?.record.paused).toEqual({
      since: '2026-01-01T00:00:00.000Z',
      by: 'ann',
      reason: 'wrong way',
    });
    // Held, the task stays parked whatever its checkpoints say of its steps.
    expect(parks.at(-1)).toBe(true);

    steering.resume(Date.parse('2026-01-01T01:00:00.000Z'));
    steering.tell('use v2', '2026-01-01T01:00:00.000Z');
    const resumed = writer.steered();
    await release();
    expect(await resumed).toBe(true);
    expect(calls[1]?.record.paused).toBeUndefined();
    expect(calls[1]?.record).toMatchObject({
      pausedMs: 3_600_000,
      toldCount: 1,
      told: [{ id: 'm-1', text: 'use v2' }],
    });
    expect(parks.at(-1)).toBe(false);
  });

  it('lets go of what its claim read only for the start once the first checkpoint is made', async () => {
    const { writer, snapshot, calls, claimed } = await writerOf();
    // As a resumed task's claim would hold it, for its workflow's start.
    claimed.snapshot = { status: 'active', value: 'plan' };
    expect(claimed.record).toBeDefined();
    writer.snapshot(snapshot);
    expect(claimed.snapshot).toBeUndefined();
    expect(claimed.record).toBeUndefined();
    // Judged against the claim's record before it let go: the first checkpoint adds only the snapshot, unwritten.
    expect(calls).toEqual([]);
  });

  it('lets go of its last record while its task sleeps, and writes as it would have once given it back', async () => {
    const { writer, snapshot, calls, release } = await writerOf();
    writer.snapshot(snapshot);
    // The first checkpoint, unwritten: the sleeping task keeps it, and that it is unwritten.
    const lastMade = writer.lastMade;
    expect(lastMade).toEqual({
      record: expect.objectContaining({ status: 'running', state: 'plan' }),
      unwritten: true,
    });
    writer.detach();
    expect(writer.lastMade).toEqual({});
    // Given back as the task wakes, read from its copy (JSON).
    writer.awaken(JSON.parse(JSON.stringify(lastMade)));
    expect(writer.lastMade).toEqual(lastMade);
    // Let go now (a stop): the first checkpoint is written before the hand-back, as it would have been.
    const written = writer.written();
    await release();
    expect(calls.map((call) => call.record)).toEqual([lastMade.record]);
    expect((await written).totals).toEqual({ usage: snapshot.context.usage, round: 1 });
  });

  it('says when every record made so far is stored, for the steps taken in this process; and an output owed, once the record made after it is', async () => {
    const { writer, snapshot, release, calls } = await writerOf();
    // Nothing made yet (the first checkpoint, entering the first step, is not written): stored at once.
    writer.snapshot(snapshot);
    expect(await writer.stored()).toBe(true);
    writer.snapshot(snapshot);
    await expect.poll(() => calls.length).toBe(1);
    writer.activity(activity);
    const both = settled(writer.stored());
    await release();
    await Promise.resolve();
    expect(both).toEqual([]);
    await release();
    await expect.poll(() => both).toEqual([true]);
    // A local step's output, owed before the workflow hears it and makes the record that holds it.
    writer.owe();
    expect(writer.owes).toBe(true);
    const owed = settled(writer.stored());
    await Promise.resolve();
    expect(owed).toEqual([]);
    writer.snapshot(snapshot);
    expect(writer.owes).toBe(true);
    await release();
    await expect.poll(() => owed).toEqual([true]);
    expect(writer.owes).toBe(false);
  });

  it('settles an owed output only by the snapshot that holds it, not by an activity or steering write queued before it', async () => {
    const steering = new TaskSteering();
    const { writer, snapshot, release, calls } = await writerOf({ steering });
    writer.snapshot(snapshot);
    writer.snapshot(snapshot);
    await release();
    // A task woken with a step's reply kept while it slept: the reply was owed as it came, and the activity and the
    // message kept meanwhile are written before the workflow hears the reply.
    writer.owe();
    writer.activity(activity);
    await expect.poll(() => calls.length).toBe(2);
    steering.tell('hello', '2026-01-01T00:00:00.000Z');
    const told = writer.steered();
    const seen: boolean[] = [];
    void writer.stored().then((stored) => seen.push(stored));
    await release();
    await release();
    expect(await told).toBe(true);
    expect(calls).toHaveLength(3);
    // Both written, the output still owed: its record is not made yet.
    expect(writer.owes).toBe(true);
    await Promise.resolve();
    expect(seen).toEqual([]);
    writer.snapshot(snapshot);
    expect(writer.owes).toBe(true);
    await release();
    await expect.poll(() => seen).toEqual([true]);
    expect(writer.owes).toBe(false);
    expect(await writer.stored()).toBe(true);
  });

  it('says an output owed when the run ends, its snapshot never heard, was not stored', async () => {
    const { writer, snapshot, release } = await writerOf();
    writer.snapshot(snapshot);
    writer.snapshot(snapshot);
    await release();
    writer.owe();
    const owed = writer.stored();
    writer.close();
    expect(await owed).toBe(false);
    expect(await writer.stored()).toBe(false);
  });

  it('says a record dropped when the run ends was not stored, though the write before it lands', async () => {
    const { writer, snapshot, release, calls } = await writerOf();
    writer.snapshot(snapshot);
    writer.snapshot(snapshot);
    const first = writer.stored();
    await expect.poll(() => calls.length).toBe(1);
    writer.snapshot(snapshot);
    const second = writer.stored();
    // The run here ends while the first write is in flight: the second is dropped, never written.
    writer.close();
    await release();
    expect(await first).toBe(true);
    expect(await second).toBe(false);
  });

  it('says a record was not stored, and will not be, once another coordinator took the task over', async () => {
    const { store, writer, snapshot, release } = await writerOf();
    const current = await store.get('task-1');
    await store.put('task-1', { ...(current?.value as WorkflowRecord), lease: 'another' });
    writer.snapshot(snapshot);
    writer.snapshot(snapshot);
    const stored = writer.stored();
    await release();
    expect(await stored).toBe(false);
    expect(await writer.stored()).toBe(false);
    expect(writer.owes).toBe(false);
  });

  it('still owes an output once another coordinator took the task over or the run ended, and says it will not be stored', async () => {
    const { store, writer, snapshot, release } = await writerOf();
    const current = await store.get('task-1');
    await store.put('task-1', { ...(current?.value as WorkflowRecord), lease: 'another' });
    writer.snapshot(snapshot);
    writer.owe();
    writer.snapshot(snapshot);
    const stored = writer.stored();
    await release();
    expect(await stored).toBe(false);
    // What would send a step over NATS now asks, and hears that the output will not be stored: nothing goes out.
    expect(writer.owes).toBe(true);

    const ended = await writerOf();
    ended.writer.snapshot(ended.snapshot);
    ended.writer.snapshot(ended.snapshot);
    await ended.release();
    ended.writer.owe();
    ended.writer.close();
    expect(ended.writer.owes).toBe(true);
    expect(await ended.writer.stored()).toBe(false);
  });

  it('answers a steering write that could not be made as not written', async () => {
    const steering = new TaskSteering();
    const { writer, snapshot, release, failNext } = await writerOf({ steering });
    writer.snapshot(snapshot);
    writer.snapshot(snapshot);
    await release();
    steering.tell('hello', '2026-01-01T00:00:00.000Z');
    failNext(new Error('the store refused it'));
    const told = writer.steered();
    await release();
    expect(await told).toBe(false);
    expect(writer.ending).toBe(false);
  });
  it('holds back the checkpoint of a local step’s output while the workflow runs on here, and writes only the latest once a later step needs it', async () => {
    const { writer, snapshot, release, calls, clock } = await writerOf();
    writer.snapshot(snapshot);
    writer.snapshot(snapshot);
    await release();
    expect(calls.map((c) => c.record.progress)).toEqual([1]);
    // The planner replied here (its final reply in no journal) and the executor starts: the record that holds the
    // planner's output waits.
    writer.owe();
    writer.snapshot(snapshot);
    expect(writer.owes).toBe(true);
    // The executor too ends with a final reply, within the linger: the later record holds both outputs.
    writer.owe();
    writer.snapshot(snapshot);
    await turnsPass();
    expect(calls).toHaveLength(1);
    expect(clock.pending()).toHaveLength(1);
    // The reviewer's journal asks for every checkpoint so far before its first write: the latest goes now, alone.
    const stored = writer.stored();
    await release();
    expect(await stored).toBe(true);
    expect(calls.map((c) => c.record.progress)).toEqual([1, 3]);
    expect(writer.owes).toBe(false);
    expect(clock.pending()).toEqual([]);
  });

  it('writes a held-back checkpoint once it has lingered; with a linger of 0, at once', async () => {
    const { writer, snapshot, release, calls, clock } = await writerOf({ lingerMs: 50 });
    writer.snapshot(snapshot);
    writer.snapshot(snapshot);
    await release();
    writer.owe();
    writer.snapshot(snapshot);
    clock.advance(49);
    await turnsPass();
    expect(calls).toHaveLength(1);
    clock.advance(1);
    await expect.poll(() => calls.length).toBe(2);
    await release();
    await expect.poll(() => writer.owes).toBe(false);

    const atOnce = await writerOf({ lingerMs: 0 });
    atOnce.writer.snapshot(atOnce.snapshot);
    atOnce.writer.snapshot(atOnce.snapshot);
    await atOnce.release();
    atOnce.writer.owe();
    atOnce.writer.snapshot(atOnce.snapshot);
    await expect.poll(() => atOnce.calls.length).toBe(2);
    expect(atOnce.clock.pending()).toEqual([]);
  });

  it('lets the next write of any kind carry a held-back checkpoint, and still owes an output replied after it', async () => {
    const { writer, snapshot, release, calls, clock } = await writerOf();
    writer.snapshot(snapshot);
    writer.snapshot(snapshot);
    await release();
    writer.owe();
    writer.snapshot(snapshot);
    // A step in another branch replies here before the workflow hears it; meanwhile its step starts waiting on a person.
    writer.owe();
    writer.activity(activity);
    await release();
    // That write holds the first output: its held checkpoint is not written besides.
    expect(calls.map((c) => [c.record.progress, c.record.activity?.kind])).toEqual([
      [1, 'agent'],
      [2, 'person'],
    ]);
    expect(clock.pending()).toEqual([]);
    // The second output is in no record yet.
    expect(writer.owes).toBe(true);
    const stored = settled(writer.stored());
    await Promise.resolve();
    expect(stored).toEqual([]);
    writer.snapshot(snapshot);
    await release();
    await expect.poll(() => stored).toEqual([true]);
    expect(calls.map((c) => c.record.progress)).toEqual([1, 2, 3]);
  });

  it('never holds back the final record, and writes a held-back checkpoint before the ending of a run stopped from outside', async () => {
    const { writer, snapshot, release, calls } = await writerOf();
    writer.snapshot(snapshot);
    writer.snapshot(snapshot);
    await release();
    writer.owe();
    writer.snapshot(snapshot);
    // The last step's final reply ends the task: its record goes at once, and holds the output held back before it.
    writer.owe();
    writer.snapshot({
      ...snapshot,
      status: 'done',
      output: {
        status: 'completed',
        output: 'reviewed',
        approved: true,
        rounds: 1,
        usage: snapshot.context.usage,
        usageByAgent: {},
      },
    } as WorkflowSnapshot);
    await expect.poll(() => calls.length).toBe(2);
    expect(calls[1]?.record).toMatchObject({ status: 'completed', progress: 3 });
    const written = writer.written();
    await release();
    expect(await written).toMatchObject({ finalWritten: true });
    expect(calls).toHaveLength(2);

    // A stop lets the workflow go while its checkpoint is held back: that checkpoint is written for the next run.
    const stopped = await writerOf();
    stopped.writer.snapshot(stopped.snapshot);
    stopped.writer.snapshot(stopped.snapshot);
    await stopped.release();
    stopped.writer.owe();
    stopped.writer.snapshot(stopped.snapshot);
    const ending = stopped.writer.written();
    await stopped.release();
    expect(await ending).toMatchObject({ finalWritten: false, lost: false });
    expect(stopped.calls.map((c) => [c.record.status, c.record.progress])).toEqual([
      ['running', 1],
      ['running', 2],
    ]);
  });
  it('takes a linger of 0 or more milliseconds, 20 by default, and refuses any other', () => {
    expect(checkpointLingerOf(undefined)).toBe(DEFAULT_CHECKPOINT_LINGER_MS);
    expect(DEFAULT_CHECKPOINT_LINGER_MS).toBe(20);
    expect(checkpointLingerOf(0)).toBe(0);
    expect(checkpointLingerOf(250)).toBe(250);
    expect(checkpointLingerOf(2_147_483_647)).toBe(2_147_483_647);
    // Past what a timer holds, Node would fire it at once.
    for (const bad of [-1, Number.NaN, Number.POSITIVE_INFINITY, 2_147_483_648])
      expect(() => checkpointLingerOf(bad)).toThrow(
        `checkpointLingerMs must be 0 (every checkpoint written at once) or a number of milliseconds above 0, at most 2147483647, not ${bad}`,
      );
  });
  it('still owes a held-back output once the record is lost or the run here is over, writing nothing after', async () => {
    const lost = await writerOf();
    const current = await lost.store.get('task-1');
    await lost.store.put('task-1', { ...(current?.value as WorkflowRecord), lease: 'another' });
    lost.writer.snapshot(lost.snapshot);
    lost.writer.snapshot(lost.snapshot);
    await expect.poll(() => lost.calls.length).toBe(1);
    lost.writer.owe();
    lost.writer.snapshot(lost.snapshot);
    // The write before it finds another coordinator's lease: the held checkpoint is thrown away, the output owed.
    await lost.release();
    await expect.poll(() => lost.told).toEqual([{ type: 'lease.lost' }]);
    expect(lost.writer.owes).toBe(true);
    expect(await lost.writer.stored()).toBe(false);
    expect(lost.clock.pending()).toEqual([]);

    const closed = await writerOf();
    closed.writer.snapshot(closed.snapshot);
    closed.writer.snapshot(closed.snapshot);
    await closed.release();
    closed.writer.owe();
    closed.writer.snapshot(closed.snapshot);
    closed.writer.close();
    expect(closed.writer.owes).toBe(true);
    expect(await closed.writer.stored()).toBe(false);
    // Its linger is gone with it: nothing is written after the close.
    expect(closed.clock.pending()).toEqual([]);
    closed.clock.advance(60_000);
    await turnsPass();
    expect(closed.calls).toHaveLength(1);
  });

  it('fails the task when the write that carries a held-back checkpoint cannot be stored, whatever else it records', async () => {
    const { writer, snapshot, calls, told, release, failNext } = await writerOf();
    writer.snapshot(snapshot);
    writer.snapshot(snapshot);
    await release();
    writer.owe();
    writer.snapshot(snapshot);
    // An activity note carries the held checkpoint: its failure is the checkpoint's.
    writer.activity(activity);
    await expect.poll(() => calls.length).toBe(2);
    failNext(new Error('value too large'));
    await release();
    await expect
      .poll(() => told)
      .toEqual([{ type: 'checkpoint.poisoned', error: new Error('value too large') }]);
  });

  it('counts a failed write of records queued together as the gravest of theirs: a checkpoint fails the task', async () => {
    const { writer, snapshot, calls, told, release, failNext } = await writerOf();
    writer.snapshot(snapshot);
    writer.snapshot(snapshot);
    await expect.poll(() => calls.length).toBe(1);
    // A checkpoint and, after it, an activity note queue behind the write in flight: the note's record is written.
    writer.snapshot(snapshot);
    writer.activity(activity);
    await release();
    await expect.poll(() => calls.length).toBe(2);
    expect(calls[1]?.record.activity).toEqual(activity);
    failNext(new Error('value too large'));
    await release();
    await expect
      .poll(() => told)
      .toEqual([{ type: 'checkpoint.poisoned', error: new Error('value too large') }]);
  });
});
