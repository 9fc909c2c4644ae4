import { AgentStepRequest, ControlMessage, subjects, WorkflowRecord } from '@troupe/protocol';
import type { HumanGate, StepJournal } from '@troupe/runtime';
import { MemoryBus, MemoryKv, SimulatedClock } from '@troupe/testkit';
import { describe, expect, it } from 'vitest';
import type { PipelineConfig } from '../src/config/pipelineSchema.ts';
import { TaskSteering } from '../src/task/taskSteering.ts';
import type { startPipelineRunner } from '../src/workflow/pipelineRunner.ts';
import { forwardKey, forwardTold } from '../src/workflow/subTaskSteering.ts';
import type { PipelineRunInput, PipelineRunOutput } from '../src/workflow/workflowTypes.ts';
import { type MemoryDelivery, MemoryTaskIntake } from './memoryTaskIntake.ts';
import {
  HOUR,
  ok,
  paused,
  pipeline,
  type Step,
  setUp,
  startRunner,
  usage,
} from './support/steeringRunner.ts';

const AT = '2026-01-01T00:00:00.000Z';

type Runner = Awaited<ReturnType<typeof setUp>>;

/**
 * Stops `first` and has a second runner, on the same bus, store and clock, take task `taskId` over from its record
 * (another delivery of its message): what a `kill -9` of its coordinator and a restart come to for the record.
 */
async function takeOver(
  first: Runner,
  config: PipelineConfig,
  task: MemoryDelivery,
  payload: { id: string; goal: string },
  extra: Pick<Parameters<typeof startPipelineRunner>[0], 'subPipelines'> = {},
): Promise<MemoryDelivery> {
  await first.runner.stop();
  await task.handled;
  // The steps the first runner sent are gone with it: only those sent again count.
  first.waiting.splice(0);
  const lease = (await first.record(payload.id))?.lease;
  const { intake } = await startRunner(first, config, extra);
  const again = intake.deliver(payload, { streamSequence: task.delivery.streamSequence, deliveryCount: 2 });
  await expect.poll(async () => (await first.record(payload.id))?.lease).not.toBe(lease);
  return again;
}

describe('a tell in a foreach step', () => {
  it('reaches the items at work when told, and not an item that starts after one of them read it', async () => {
    const config = pipeline([
      { id: 'plan', kind: 'agent', agent: 'planner' },
      {
        id: 'each',
        kind: 'foreach',
        items: 'steps.plan.output.parts',
        maxItems: 5,
        concurrency: 2,
        do: [{ id: 'build', kind: 'agent', agent: 'builder' }],
      },
    ]);
    const { intake, control, next, record, bus } = await setUp(config);
    const task = intake.deliver({ id: 'task-f1', goal: 'each' });
    ok(await next('task-f1.plan.1'), JSON.stringify({ parts: ['a', 'b', 'c'] }));
    const a = await next('task-f1.build.1.i0');
    const b = await next('task-f1.build.1.i1');
    await control('task-f1', { action: 'tell', text: 'use v2' });
    // Item a reads it and ends: item c, not yet started when it was told, is not given it.
    ok(a, 'built a', { toldRead: ['m-1'] });
    const c = await next('task-f1.build.1.i2');
    expect(c.value.told).toBeUndefined();
    // Item b, at work when it was told, stops for a pause before reading it: sent again, it is given it.
    await control('task-f1', { action: 'pause' });
    paused(b);
    ok(c);
    await bus.settled();
    expect((await record('task-f1'))?.told?.map((m) => m.id)).toEqual(['m-1']);
    await control('task-f1', { action: 'resume' });
    const again = await next('task-f1.build.1.i1');
    expect(again.value.told?.map((m) => m.text)).toEqual(['use v2']);
    ok(again, 'built b', { toldRead: ['m-1'] });
    await task.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
    expect((await record('task-f1'))?.told).toBeUndefined();
  });

  it('gives an item that starts the message no item at work has read', async () => {
    const config = pipeline([
      { id: 'plan', kind: 'agent', agent: 'planner' },
      {
        id: 'each',
        kind: 'foreach',
        items: 'steps.plan.output.parts',
        maxItems: 5,
        concurrency: 1,
        do: [{ id: 'build', kind: 'agent', agent: 'builder' }],
      },
    ]);
    const { intake, control, next } = await setUp(config);
    const task = intake.deliver({ id: 'task-f2', goal: 'each' });
    ok(await next('task-f2.plan.1'), JSON.stringify({ parts: ['a', 'b'] }));
    const a = await next('task-f2.build.1.i0');
    await control('task-f2', { action: 'tell', text: 'use v2' });
    // Item a ends without another model call, so without reading it: the next item gets it.
    ok(a);
    const b = await next('task-f2.build.1.i1');
    expect(b.value.told?.map((m) => m.text)).toEqual(['use v2']);
    ok(b, 'built b', { toldRead: ['m-1'] });
    await task.handled;
  });
});

describe('a tell while a step waits on a person', () => {
  it('waits unread while a human step asks, goes in the next agent step, and stays until a reply lists it', async () => {
    const config = pipeline([
      { id: 'ask', kind: 'human', prompt: 'Which API?' },
      { id: 'build', kind: 'agent', agent: 'builder' },
      { id: 'check', kind: 'agent', agent: 'planner' },
    ]);
    let answer: (text: string) => void = () => {};
    let asked = false;
    const gate: HumanGate = {
      approve: async () => ({ decision: 'deny', reason: 'not asked' }),
      ask: async (_question, _scope, _signal, options) => {
        await options?.onAsked?.('q1');
        asked = true;
        return new Promise<string>((resolve) => (answer = resolve));
      },
    };
    const ids = new Map<string, string>();
    const journal = {
      humanRequest: async (key: string) => ids.get(key),
      recordHumanRequest: async (key: string, id: string) => void ids.set(key, id),
    } as unknown as StepJournal;
    let runner: Runner | undefined;
    // The people wait on the runner's clock, made by setUp: read when a human step starts.
    const people = {
      gate,
      journal,
      get clock() {
        return (runner as Runner).clock;
      },
    };
    runner = await setUp(config, { people });
    const { intake, control, next, record, sent, clock, bus } = runner;
    const task = intake.deliver({ id: 'task-p1', goal: 'ask first' });
    await expect.poll(() => asked).toBe(true);
    await control('task-p1', { action: 'tell', text: 'use v2', by: 'ann' });
    await bus.settled();
    clock.advance(60_000);
    await bus.settled();
    expect(sent).toEqual([]);
    expect((await record('task-p1'))?.told?.map((m) => m.text)).toEqual(['use v2']);
    answer('v2');
    const build = await next('task-p1.build.1');
    expect(build.value.told).toEqual([{ id: 'm-1', text: 'use v2', by: 'ann', at: expect.any(String) }]);
    // Its agent made no model call after it came: its reply lists nothing, and the message stays unread.
    ok(build);
    const check = await next('task-p1.check.1');
    expect(check.value.told?.map((m) => m.id)).toEqual(['m-1']);
    expect((await record('task-p1'))?.told?.map((m) => m.id)).toEqual(['m-1']);
    ok(check, 'checked', { toldRead: ['m-1'] });
    await task.handled;
    expect((await record('task-p1'))?.told).toBeUndefined();
  });
});

/** A `pipeline` step's sub-pipeline `outline`, run by a runner of its own on the parent's bus and store. */
const outline = (flow: unknown[]) =>
  pipeline(flow, { name: 'outline', agents: { drafter: { instructions: 'Draft.' } } });

/**
 * Starts the runner of `outline` beside the parent's, and the parent's `subPipelines` it serves: a sub-task is
 * delivered once (a later run of the parent's step waits on the same one), and its end read from its record.
 */
function subPipelineOf(parent: () => Runner, config: PipelineConfig) {
  const intake = new MemoryTaskIntake();
  const waiting: Step[] = [];
  const runs = new Map<string, Promise<void>>();
  let started = false;
  const start = async () => {
    if (started) return;
    started = true;
    const { bus, store, clock } = parent();
    bus.subscribe(subjects.agent('outline', 'drafter'), AgentStepRequest, (delivery) => {
      waiting.push(delivery);
    });
    await startRunner({ bus, store, clock }, config, {}, intake);
  };
  const subPipelines = async (input: PipelineRunInput, signal: AbortSignal): Promise<PipelineRunOutput> => {
    let run = runs.get(input.task.id);
    if (run === undefined) {
      const { id, goal, parent: from } = input.task;
      run = intake.deliver({ id, goal, parent: from }).handled;
      runs.set(id, run);
    }
    const left = new Promise<'left'>((resolve) => signal.addEventListener('abort', () => resolve('left')));
    if ((await Promise.race([run, left])) === 'left')
      return { ok: false, code: 'aborted', message: 'the step was left', usage, durationMs: 1 };
    const ended = (await parent().store.get(input.task.id))?.value;
    return ended?.status === 'completed'
      ? { ok: true, output: 'outlined', usage, durationMs: 1 }
      : { ok: false, code: 'failed', message: `sub-task ${ended?.status}`, usage, durationMs: 1 };
  };
  /** Waits for the sub-task's step of `step` to be sent, and takes it off the waiting list. */
  const next = async (step: string): Promise<Step> => {
    let found: Step | undefined;
    await expect
      .poll(() => {
        const at = waiting.findIndex((d) => d.value.stepId.endsWith(`.${step}.1`));
        if (at >= 0) found = waiting.splice(at, 1)[0];
        return found !== undefined;
      })
      .toBe(true);
    return found as Step;
  };
  return { start, subPipelines, next };
}

describe('a tell into a sub-pipeline', () => {
  it("reaches the sub-task's agent at work once, a restored parent forwarding nothing new, and no later step of the parent", async () => {
    const config = pipeline([
      { id: 'sub', kind: 'pipeline', pipeline: 'outline' },
      { id: 'build', kind: 'agent', agent: 'builder' },
    ]);
    let first: Runner | undefined;
    const sub = subPipelineOf(
      () => first as Runner,
      outline([
        { id: 'draft', kind: 'agent', agent: 'drafter' },
        { id: 'polish', kind: 'agent', agent: 'drafter' },
      ]),
    );
    first = await setUp(config, { subPipelines: sub.subPipelines });
    await sub.start();
    const { bus, control, record } = first;
    const forwards: ControlMessage[] = [];
    bus.subscribe(subjects.allControl, ControlMessage, (delivery) => {
      if (delivery.value.action === 'tell' && !delivery.subject.endsWith('task-s1'))
        forwards.push(delivery.value);
    });
    const payload = { id: 'task-s1', goal: 'outline it' };
    const task = first.intake.deliver(payload);
    const draft = await sub.next('draft');
    const subTask = draft.value.taskId;

    expect(await control('task-s1', { action: 'tell', text: 'use v2', by: 'ann' })).toMatchObject({
      messageId: 'm-1',
    });
    // Forwarded with the teller's name and a key made from the parent's message: the sub-task records it.
    await expect
      .poll(async () => (await record(subTask))?.told?.map((m) => [m.text, m.by]))
      .toEqual([['use v2', 'ann']]);
    expect((await record(subTask))?.toldKeys).toEqual([
      { key: forwardKey('task-s1', 'm-1'), messageId: 'm-1' },
    ]);
    // The parent keeps it until the sub-task has read it.
    expect((await record('task-s1'))?.told?.map((m) => m.id)).toEqual(['m-1']);

    // The parent's coordinator dies; another restores it from its record and forwards it again, under the same key.
    const again = await takeOver(first, config, task, payload, { subPipelines: sub.subPipelines });
    await expect.poll(() => forwards.length).toBe(2);
    await bus.settled();
    expect(forwards[1]).toEqual(forwards[0]);
    expect((await record(subTask))?.toldCount).toBe(1);
    expect(
      new Set(
        bus
          .eventsOf('task.told')
          .filter((e) => e.taskId === subTask)
          .map((e) => e.id),
      ).size,
    ).toBe(1);

    // The sub-task's agent at work reads it; its next step and the parent's next step are not given it.
    ok(draft, 'drafted', { toldRead: ['m-1'] });
    const polish = await sub.next('polish');
    expect(polish.value.told).toBeUndefined();
    ok(polish);
    const build = await first.next('task-s1.build.1');
    expect(build.value.told).toBeUndefined();
    ok(build);
    await again.handled;
    expect((await record('task-s1'))?.told).toBeUndefined();
  });

  it("keeps a message the sub-task took but ended without reading for the parent's next step", async () => {
    const config = pipeline([
      { id: 'sub', kind: 'pipeline', pipeline: 'outline' },
      { id: 'build', kind: 'agent', agent: 'builder' },
    ]);
    let parent: Runner | undefined;
    const sub = subPipelineOf(
      () => parent as Runner,
      outline([{ id: 'draft', kind: 'agent', agent: 'drafter' }]),
    );
    parent = await setUp(config, { subPipelines: sub.subPipelines });
    await sub.start();
    const task = parent.intake.deliver({ id: 'task-s2', goal: 'outline it' });
    const draft = await sub.next('draft');
    await parent.control('task-s2', { action: 'tell', text: 'use v2' });
    await expect.poll(async () => (await parent.record(draft.value.taskId))?.told?.length).toBe(1);
    // Its agent ends without another model call: nobody in the sub-task read it.
    ok(draft);
    const build = await parent.next('task-s2.build.1');
    expect(build.value.told?.map((m) => m.text)).toEqual(['use v2']);
    ok(build, 'built', { toldRead: ['m-1'] });
    await task.handled;
  });
  it('tries a forward again while nobody runs the sub-task yet, and stops once the step has ended', async () => {
    const config = pipeline([
      { id: 'sub', kind: 'pipeline', pipeline: 'outline' },
      { id: 'build', kind: 'agent', agent: 'builder' },
    ]);
    let subTask = '';
    let finish: (output: PipelineRunOutput) => void = () => {};
    const { intake, control, next, bus, clock } = await setUp(config, {
      subPipelines: (input) => {
        subTask = input.task.id;
        return new Promise((resolve) => (finish = resolve));
      },
    });
    // The sub-task's coordinator: it has not claimed the sub-task at the first tell, and takes the second.
    const tells: ControlMessage[] = [];
    bus.subscribe(subjects.allControl, ControlMessage, (delivery) => {
      if (subTask === '' || !delivery.subject.endsWith(subTask) || delivery.value.action !== 'tell') return;
      tells.push(delivery.value);
      delivery.respond(
        tells.length === 1
          ? { ok: false, error: { code: 'not_running', message: 'no coordinator runs it right now' } }
          : { ok: true, taskId: subTask, outcome: 'told', messageId: 'm-1' },
      );
    });
    const task = intake.deliver({ id: 'task-s3', goal: 'outline it' });
    await expect.poll(() => subTask).not.toBe('');
    await control('task-s3', { action: 'tell', text: 'use v2' });
    await expect.poll(() => tells.length).toBe(1);
    await bus.settled();
    clock.advance(500);
    await expect.poll(() => tells.length).toBe(2);
    expect(tells[1]).toEqual({ action: 'tell', text: 'use v2', key: forwardKey('task-s3', 'm-1') });
    // Its record unread (none here), the sub-task's answer says it took it: read by its agents, not the parent's.
    finish({ ok: true, output: 'outlined', usage, durationMs: 1 });
    const build = await next('task-s3.build.1');
    expect(build.value.told).toBeUndefined();
    await control('task-s3', { action: 'tell', text: 'and log it' });
    await bus.settled();
    clock.advance(HOUR);
    await bus.settled();
    expect(tells).toHaveLength(2);
    ok(build, 'built', { toldRead: ['m-2'] });
    await task.handled;
  });
  it('forwards a message only once its record is written, and never one taken back', async () => {
    const clock = new SimulatedClock();
    const bus = new MemoryBus({ clock });
    const heard: ControlMessage[] = [];
    bus.subscribe(subjects.control('sub-1'), ControlMessage, (delivery) => {
      heard.push(delivery.value);
      delivery.respond({ ok: true, taskId: 'sub-1', outcome: 'told', messageId: `m-${heard.length}` });
    });
    const steering = new TaskSteering();
    const kept = steering.tell('kept', AT);
    const lost = steering.tell('lost', AT);
    const store = new MemoryKv(WorkflowRecord);
    const forwarding = forwardTold(
      { bus, clock, store },
      'sub-1',
      'task-1',
      steering,
      new AbortController().signal,
    );
    await bus.settled();
    expect(heard).toEqual([]);
    // The one's record is written; the other's failed, and it is taken back.
    steering.read([lost.id]);
    steering.recorded(kept);
    await expect.poll(() => heard.map((m) => (m.action === 'tell' ? m.text : m.action))).toEqual(['kept']);
    await bus.settled();
    expect(await forwarding.settle(true)).toEqual([kept.id]);
  });
});

describe('the told bookkeeping across a restore', () => {
  it('gives each parallel branch exactly the messages it had not read', async () => {
    const config = pipeline([
      {
        id: 'both',
        kind: 'parallel',
        branches: {
          left: [
            { id: 'plan', kind: 'agent', agent: 'planner' },
            { id: 'replan', kind: 'agent', agent: 'planner' },
          ],
          right: [{ id: 'build', kind: 'agent', agent: 'builder' }],
        },
      },
      { id: 'after', kind: 'agent', agent: 'planner' },
    ]);
    const first = await setUp(config);
    const payload = { id: 'task-r1', goal: 'both' };
    const task = first.intake.deliver(payload);
    const left = await first.next('task-r1.plan.1');
    await first.next('task-r1.build.1');
    await first.control('task-r1', { action: 'tell', text: 'use v2' });
    // The left branch reads it and goes on; the right one, at work when it was told, has not read it yet.
    ok(left, 'planned', { toldRead: ['m-1'] });
    const replan = await first.next('task-r1.replan.1');
    expect(replan.value.told).toBeUndefined();
    await expect
      .poll(async () => (await first.record('task-r1'))?.toldOwed)
      .toEqual([{ messageId: 'm-1', steps: ['task-r1.build.1'] }]);

    const again = await takeOver(first, config, task, payload);
    const build = await first.next('task-r1.build.1');
    const replanAgain = await first.next('task-r1.replan.1');
    expect(build.value.told?.map((m) => m.id)).toEqual(['m-1']);
    expect(replanAgain.value.told).toBeUndefined();
    ok(replanAgain);
    // Kept for the right branch alone, in the record too (its checkpoint past replan), until it reads it.
    await expect.poll(async () => (await first.record('task-r1'))?.state).not.toContain('replan');
    expect((await first.record('task-r1'))?.toldOwed).toEqual([
      { messageId: 'm-1', steps: ['task-r1.build.1'] },
    ]);
    ok(build, 'built', { toldRead: ['m-1'] });
    const after = await first.next('task-r1.after.1');
    expect(after.value.told).toBeUndefined();
    ok(after);
    await again.handled;
    const ended = await first.record('task-r1');
    expect(ended?.told).toBeUndefined();
    expect(ended?.toldOwed).toBeUndefined();
  });

  it('forgets, once restored, a step the record owed a message that is not at work any more', async () => {
    const steering = new TaskSteering();
    const left = steering.atWork('s.left.1');
    steering.atWork('s.right.1');
    steering.tell('one', AT);
    steering.read(['m-1'], 's.left.1');
    left();
    await Promise.resolve();
    expect(steering.fields().toldOwed).toEqual([{ messageId: 'm-1', steps: ['s.right.1'] }]);
    // Restored: the message goes to the right branch only; gone from it, the message is dropped.
    const restored = new TaskSteering(steering.fields());
    expect(restored.toldFor('s.later.1')).toEqual([]);
    expect(restored.told.map((m) => m.id)).toEqual(['m-1']);
    restored.restored();
    await Promise.resolve();
    expect(restored.told).toEqual([]);
    expect(restored.fields().toldOwed).toBeUndefined();
  });
});
