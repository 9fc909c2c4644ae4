import { type AgentStepReply, ControlMessage, subjects } from '@troupe/protocol';
import { createLogger, TransportError } from '@troupe/runtime';
import { describe, expect, it } from 'vitest';
import { startPipelineRunner } from '../src/workflow/pipelineRunner.ts';
import type { PipelineRunOutput } from '../src/workflow/workflowTypes.ts';
import { MemoryTaskIntake } from './memoryTaskIntake.ts';
import {
  HOUR,
  ok,
  paused,
  pipeline,
  running,
  setUp,
  startRunner,
  twoSteps,
  usage,
} from './support/steeringRunner.ts';

describe('pause and resume', () => {
  it('holds a step its agent stopped for the pause, counts no time against it, and sends it again on resume', async () => {
    const { intake, control, next, record, clock, bus, sent, waiting } = await setUp(twoSteps);
    const task = intake.deliver({ id: 'task-1', goal: 'build it' });
    const plan = await next('task-1.plan.1');

    expect(await control('task-1', { action: 'pause', by: 'ann', reason: 'wrong way' })).toEqual({
      ok: true,
      taskId: 'task-1',
      outcome: 'paused',
    });
    // Recorded before the receipt, and told to the hosts.
    expect((await record('task-1'))?.paused).toEqual({
      since: expect.any(String),
      by: 'ann',
      reason: 'wrong way',
    });
    expect(bus.eventsOf('task.paused')[0]?.data).toEqual({
      state: 'plan',
      round: 1,
      by: 'ann',
      reason: 'wrong way',
      since: (await record('task-1'))?.paused?.since,
    });
    expect(task.parked()).toBe(true);

    // The host finishes its current call and says it stopped for the pause: nothing is sent meanwhile.
    paused(plan);
    await bus.settled();
    clock.advance(10 * HOUR);
    await bus.settled();
    expect(sent).toHaveLength(1);
    expect(waiting).toHaveLength(0);
    expect((await record('task-1'))?.status).toBe('running');

    expect(await control('task-1', { action: 'resume', by: 'bob' })).toEqual({
      ok: true,
      taskId: 'task-1',
      outcome: 'resumed',
    });
    const again = await next('task-1.plan.1');
    // Sent again under the same id, never as a fresh run: the journal answers what was done.
    expect(again.value.fresh).toBeUndefined();
    const resumed = bus.eventsOf('task.resumed')[0]?.data;
    expect(resumed).toMatchObject({ after: 'pause', by: 'bob', state: 'plan', round: 1 });
    expect(resumed?.pausedMs).toBeGreaterThanOrEqual(10 * HOUR);
    const afterResume = await record('task-1');
    expect(afterResume?.paused).toBeUndefined();
    expect(afterResume?.pausedMs).toBeGreaterThanOrEqual(10 * HOUR);
    expect(task.parked()).toBe(false);

    // The step's 60 s timeout did not count the ten hours held.
    ok(again);
    ok(await next('task-1.build.1'));
    await task.handled;
    expect((await record('task-1'))?.status).toBe('completed');
  });

  it('counts the time a step took to stop after the pause as held, not against its timeout', async () => {
    const { intake, control, next, clock, bus, record } = await setUp(twoSteps);
    const task = intake.deliver({ id: 'task-15', goal: 'build it' });
    const plan = await next('task-15.plan.1');
    await control('task-15', { action: 'pause' });
    // Its host takes 50 of the step's 60 s to finish its call, then stops for the pause.
    clock.advance(50_000);
    paused(plan);
    await bus.settled();
    clock.advance(HOUR);
    await control('task-15', { action: 'resume' });
    const again = await next('task-15.plan.1');
    // Another 50 s of work: 100 s since the first send, but only 50 s not held.
    clock.advance(50_000);
    await bus.settled();
    ok(again);
    ok(await next('task-15.build.1'));
    await task.handled;
    expect((await record('task-15'))?.status).toBe('completed');
  });

  it('starts no new step while paused: a step that ends meanwhile is followed by nothing until resume', async () => {
    const { intake, control, next, record, clock, bus, sent } = await setUp(twoSteps);
    const task = intake.deliver({ id: 'task-2', goal: 'build it' });
    const plan = await next('task-2.plan.1');
    await control('task-2', { action: 'pause' });
    // A host that does not stop for pauses just finishes the step.
    ok(plan);
    await bus.settled();
    clock.advance(HOUR);
    await bus.settled();
    expect(sent.map((s) => s.stepId)).toEqual(['task-2.plan.1']);
    expect((await record('task-2'))?.state).toBe('build');

    await control('task-2', { action: 'resume' });
    const build = await next('task-2.build.1');
    ok(build);
    await task.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
  });

  it('sends a step again at once when its paused reply comes after the task was resumed', async () => {
    const { intake, control, next } = await setUp(twoSteps);
    const task = intake.deliver({ id: 'task-3', goal: 'build it' });
    const plan = await next('task-3.plan.1');
    await control('task-3', { action: 'pause' });
    await control('task-3', { action: 'resume' });
    paused(plan);
    ok(await next('task-3.plan.1'));
    ok(await next('task-3.build.1'));
    await task.handled;
  });

  it('moves the task deadline on by the time held', async () => {
    const config = pipeline(
      [
        { id: 'plan', kind: 'agent', agent: 'planner' },
        { id: 'build', kind: 'agent', agent: 'builder' },
      ],
      { budget: { timeout: 120 } },
    );
    const { intake, control, next, clock, bus } = await setUp(config);
    const task = intake.deliver({ id: 'task-4', goal: 'build it' });
    const plan = await next('task-4.plan.1');
    const deadline = plan.value.budget?.deadline ?? 0;
    await control('task-4', { action: 'pause' });
    paused(plan);
    await bus.settled();
    clock.advance(HOUR);
    await control('task-4', { action: 'resume' });
    const again = await next('task-4.plan.1');
    expect(again.value.budget?.deadline).toBeGreaterThanOrEqual(deadline + HOUR);
    ok(again);
    const build = await next('task-4.build.1');
    expect(build.value.budget?.deadline).toBe(again.value.budget?.deadline);
    ok(build);
    await task.handled;
  });

  it('refuses a second pause and a resume of a task that is not paused, changing nothing', async () => {
    const { intake, control, next, bus, clock } = await setUp(twoSteps);
    const task = intake.deliver({ id: 'task-5', goal: 'build it' });
    const plan = await next('task-5.plan.1');
    await expect(control('task-5', { action: 'resume' })).rejects.toSatisfy((error) =>
      TransportError.is(error, 'not_paused'),
    );
    await control('task-5', { action: 'pause' });
    await expect(control('task-5', { action: 'pause' })).rejects.toSatisfy((error) =>
      TransportError.is(error, 'already_paused'),
    );
    expect(bus.eventsOf('task.paused')).toHaveLength(1);
    await control('task-5', { action: 'resume' });
    // Paused again at the same step, by the same nobody: a fact of its own, with an id of its own.
    clock.advance(1_000);
    await control('task-5', { action: 'pause' });
    await control('task-5', { action: 'resume' });
    const pauses = bus.eventsOf('task.paused');
    expect(pauses).toHaveLength(2);
    expect(pauses[1]?.id).not.toBe(pauses[0]?.id);
    // Both pauses lasted 0 ms: each resume is still a fact of its own, which EVENTS does not drop as a duplicate.
    const resumes = bus.eventsOf('task.resumed');
    expect(resumes.map((event) => event.data.pausedMs)).toEqual([0, 0]);
    expect(resumes[1]?.id).not.toBe(resumes[0]?.id);
    ok(plan);
    ok(await next('task-5.build.1'));
    await task.handled;
  });

  it('keeps a task held when its resume cannot be recorded, as the refusal says, and lets it go on the next resume', async () => {
    const { intake, control, next, sent, bus, store, record } = await setUp(twoSteps);
    const task = intake.deliver({ id: 'task-18', goal: 'build it' });
    const plan = await next('task-18.plan.1');
    await control('task-18', { action: 'pause' });
    paused(plan);
    await bus.settled();
    const update = store.update.bind(store);
    let refuse = true;
    store.update = async (...args: Parameters<typeof store.update>) => {
      if (refuse) {
        refuse = false;
        throw new Error('the store refused it');
      }
      return update(...args);
    };
    await expect(control('task-18', { action: 'resume' })).rejects.toSatisfy(
      (error) => TransportError.is(error, 'not_running') && /nothing was changed/.test(String(error)),
    );
    await bus.settled();
    // Nothing was changed: the step stays held, and the task paused.
    expect(sent).toHaveLength(1);
    expect((await record('task-18'))?.paused).toBeDefined();
    expect(bus.eventsOf('task.resumed')).toHaveLength(0);
    await control('task-18', { action: 'resume' });
    ok(await next('task-18.plan.1'));
    ok(await next('task-18.build.1'));
    await task.handled;
    expect(bus.eventsOf('task.resumed')).toHaveLength(1);
  });

  it('says in task.paused when the pause began, even when a resume came before the pause was recorded', async () => {
    const { intake, control, next, bus, store, clock } = await setUp(twoSteps);
    const task = intake.deliver({ id: 'task-19', goal: 'build it' });
    const plan = await next('task-19.plan.1');
    const began = new Date(clock.now()).toISOString();
    const update = store.update.bind(store);
    let release: () => void = () => {};
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    store.update = async (...args: Parameters<typeof store.update>) => {
      await gate;
      return update(...args);
    };
    const pausing = control('task-19', { action: 'pause' });
    await bus.settled();
    // Less than the control request's 1 s timeout: the pause's receipt is still awaited.
    clock.advance(500);
    const resuming = control('task-19', { action: 'resume' });
    await bus.settled();
    release();
    await Promise.all([pausing, resuming]);
    expect(bus.eventsOf('task.paused')[0]?.data).toMatchObject({ since: began });
    expect(bus.eventsOf('task.resumed')[0]?.data).toMatchObject({ pausedMs: 500 });
    ok(plan);
    ok(await next('task-19.build.1'));
    await task.handled;
  });

  it('sends a step its agent stopped for the pause again with the files that run handed on, and counts them in its reply', async () => {
    const { intake, control, next, bus } = await setUp(twoSteps);
    const task = intake.deliver({ id: 'task-21', goal: 'build it' });
    const plan = await next('task-21.plan.1');
    await control('task-21', { action: 'pause' });
    const notes = { bytes: 5, sha256: 'a'.repeat(64) };
    paused(plan, { workspace: { files: { 'notes.md': notes }, removed: [] } });
    await control('task-21', { action: 'resume' });
    const again = await next('task-21.plan.1');
    expect(again.value.workspace).toEqual({ 'notes.md': notes });
    const plan2 = { bytes: 7, sha256: 'b'.repeat(64) };
    ok(again, 'planned', { workspace: { files: { 'plan.md': plan2 }, removed: [] } });
    const build = await next('task-21.build.1');
    expect(build.value.workspace).toEqual({ 'notes.md': notes, 'plan.md': plan2 });
    ok(build);
    await task.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
  });

  it('cancels a paused task', async () => {
    const { intake, control, next, record } = await setUp(twoSteps);
    const task = intake.deliver({ id: 'task-6', goal: 'build it' });
    paused(await next('task-6.plan.1'));
    await control('task-6', { action: 'pause' });
    await control('task-6', { action: 'cancel' });
    await task.handled;
    const ended = await record('task-6');
    expect(ended?.status).toBe('cancelled');
    expect(ended?.paused).toBeUndefined();
  });

  it('holds both branches of a parallel step, and sends both again on resume', async () => {
    const config = pipeline([
      {
        id: 'both',
        kind: 'parallel',
        branches: {
          left: [{ id: 'plan', kind: 'agent', agent: 'planner' }],
          right: [{ id: 'build', kind: 'agent', agent: 'builder' }],
        },
      },
    ]);
    const { intake, control, next, sent, bus, clock } = await setUp(config);
    const task = intake.deliver({ id: 'task-7', goal: 'both' });
    const left = await next('task-7.plan.1');
    const right = await next('task-7.build.1');
    await control('task-7', { action: 'pause' });
    paused(left);
    ok(right);
    await bus.settled();
    clock.advance(HOUR);
    await bus.settled();
    expect(sent).toHaveLength(2);
    await control('task-7', { action: 'resume' });
    ok(await next('task-7.plan.1'));
    await task.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
  });

  it('holds the items of a foreach step: no item starts a step while paused', async () => {
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
    const { intake, control, next, sent, bus, clock } = await setUp(config);
    const task = intake.deliver({ id: 'task-8', goal: 'each' });
    ok(await next('task-8.plan.1'), JSON.stringify({ parts: ['a', 'b'] }));
    const first = await next('task-8.build.1.i0');
    await control('task-8', { action: 'pause' });
    ok(first);
    await bus.settled();
    clock.advance(HOUR);
    await bus.settled();
    expect(sent.map((s) => s.stepId)).toEqual(['task-8.plan.1', 'task-8.build.1.i0']);
    await control('task-8', { action: 'resume' });
    ok(await next('task-8.build.1.i1'));
    await task.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
  });

  it('holds a step retrying after a failure: its retry is not sent until resume', async () => {
    const config = pipeline([{ id: 'plan', kind: 'agent', agent: 'planner', retry: { max: 2, backoff: 1 } }]);
    const { intake, control, next, sent, bus, clock } = await setUp(config);
    const task = intake.deliver({ id: 'task-9', goal: 'retry' });
    const first = await next('task-9.plan.1');
    first.respond({
      ok: false,
      stepId: first.value.stepId,
      error: { code: 'model_failed', message: 'bad answer' },
      usage,
      turns: 1,
    } as AgentStepReply);
    await bus.settled();
    await control('task-9', { action: 'pause' });
    clock.advance(HOUR);
    await bus.settled();
    expect(sent).toHaveLength(1);
    await control('task-9', { action: 'resume' });
    ok(await next('task-9.plan.1-r1'));
    await task.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
  });
});

describe('tell', () => {
  it('records a message before the receipt and gives it to every step sent until one reads it', async () => {
    const { intake, control, next, record, bus } = await setUp(twoSteps);
    const task = intake.deliver({ id: 'task-10', goal: 'build it' });
    const plan = await next('task-10.plan.1');
    expect(plan.value.told).toBeUndefined();

    expect(await control('task-10', { action: 'tell', text: 'use the v2 API', by: 'ann' })).toEqual({
      ok: true,
      taskId: 'task-10',
      outcome: 'told',
      messageId: 'm-1',
    });
    expect((await record('task-10'))?.told).toEqual([
      { id: 'm-1', text: 'use the v2 API', by: 'ann', at: expect.any(String) },
    ]);
    expect(bus.eventsOf('task.told')[0]?.data).toEqual({
      messageId: 'm-1',
      text: 'use the v2 API',
      by: 'ann',
    });

    // The step at work did not read it (its host said nothing of it): the next step is given it.
    ok(plan);
    const build = await next('task-10.build.1');
    expect(build.value.told?.map((m) => m.id)).toEqual(['m-1']);
    await control('task-10', { action: 'tell', text: 'and log it' });
    ok(build, 'built', { toldRead: ['m-1', 'm-2'] });
    await task.handled;
    const ended = await record('task-10');
    expect(ended?.told).toBeUndefined();
    expect(ended?.toldCount).toBe(2);
  });

  it('gives a step sent again the messages it has not reported read, and drops those it has', async () => {
    const { intake, control, next } = await setUp(twoSteps);
    const task = intake.deliver({ id: 'task-11', goal: 'build it' });
    const plan = await next('task-11.plan.1');
    await control('task-11', { action: 'tell', text: 'first' });
    await control('task-11', { action: 'tell', text: 'second' });
    await control('task-11', { action: 'pause' });
    paused(plan, { toldRead: ['m-1'] });
    await control('task-11', { action: 'resume' });
    const again = await next('task-11.plan.1');
    expect(again.value.told?.map((m) => m.text)).toEqual(['second']);
    ok(again, 'planned', { toldRead: ['m-2'] });
    const build = await next('task-11.build.1');
    expect(build.value.told).toBeUndefined();
    ok(build);
    await task.handled;
  });

  it('refuses a message past the most a task keeps unread, saying nothing was changed', async () => {
    const { intake, control, next, record } = await setUp(twoSteps);
    const task = intake.deliver({ id: 'task-16', goal: 'build it' });
    const plan = await next('task-16.plan.1');
    await control('task-16', { action: 'tell', text: 'x'.repeat(90_000) });
    await control('task-16', { action: 'tell', text: 'y'.repeat(90_000) });
    await expect(control('task-16', { action: 'tell', text: 'z'.repeat(90_000) })).rejects.toThrow(
      /takes no more messages now: .* over the 256 KiB it keeps; nothing was changed/,
    );
    expect((await record('task-16'))?.told?.map((m) => m.id)).toEqual(['m-1', 'm-2']);
    ok(plan, 'planned', { toldRead: ['m-1', 'm-2'] });
    const build = await next('task-16.build.1');
    expect(await control('task-16', { action: 'tell', text: 'z'.repeat(90_000) })).toMatchObject({
      messageId: 'm-3',
    });
    ok(build);
    await task.handled;
  });

  it('gives the retry of a failed step the messages the failed run read: the retry starts a journal of its own', async () => {
    const config = pipeline([{ id: 'plan', kind: 'agent', agent: 'planner', retry: { max: 2, backoff: 1 } }]);
    const { intake, control, next, clock, bus } = await setUp(config);
    const task = intake.deliver({ id: 'task-17', goal: 'retry' });
    const first = await next('task-17.plan.1');
    await control('task-17', { action: 'tell', text: 'use v2' });
    first.respond({
      ok: false,
      stepId: first.value.stepId,
      error: { code: 'model_failed', message: 'bad answer' },
      usage,
      turns: 1,
      toldRead: ['m-1'],
    } as AgentStepReply);
    await bus.settled();
    clock.advance(HOUR);
    const retry = await next('task-17.plan.1-r1');
    expect(retry.value.told?.map((m) => m.text)).toEqual(['use v2']);
    ok(retry, 'planned', { toldRead: ['m-1'] });
    await task.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
  });

  it('gives a parallel branch at work when told the message it has not read, after the other branch read it', async () => {
    const config = pipeline([
      {
        id: 'both',
        kind: 'parallel',
        branches: {
          left: [{ id: 'plan', kind: 'agent', agent: 'planner' }],
          right: [{ id: 'build', kind: 'agent', agent: 'builder' }],
        },
      },
      { id: 'after', kind: 'agent', agent: 'planner' },
    ]);
    const { intake, control, next } = await setUp(config);
    const task = intake.deliver({ id: 'task-22', goal: 'both' });
    const left = await next('task-22.plan.1');
    const right = await next('task-22.build.1');
    await control('task-22', { action: 'tell', text: 'use v2' });
    // The left branch reads it and ends; the right one, in a long tool call, stops for a pause before reading it.
    ok(left, 'planned', { toldRead: ['m-1'] });
    await control('task-22', { action: 'pause' });
    paused(right);
    await control('task-22', { action: 'resume' });
    // Its run after the resume starts afresh from its journal, which has no m-1: it must be given it again.
    const again = await next('task-22.build.1');
    expect(again.value.told?.map((m) => m.id)).toEqual(['m-1']);
    ok(again, 'built', { toldRead: ['m-1'] });
    // Read by every step at work when it was told: a later step is not given it.
    const after = await next('task-22.after.1');
    expect(after.value.told).toBeUndefined();
    ok(after);
    await task.handled;
  });

  it('gives a parallel branch sent to another worker the message the other branch read while it waited', async () => {
    const config = pipeline([
      {
        id: 'both',
        kind: 'parallel',
        branches: {
          left: [{ id: 'plan', kind: 'agent', agent: 'planner' }],
          right: [{ id: 'build', kind: 'agent', agent: 'builder' }],
        },
      },
    ]);
    const { intake, control, next, clock, bus } = await setUp(config);
    const task = intake.deliver({ id: 'task-23', goal: 'both' });
    const left = await next('task-23.plan.1');
    const right = await next('task-23.build.1');
    await control('task-23', { action: 'tell', text: 'use v2' });
    // The right branch's worker stops before reading it; the left reads it and ends while the right waits to go again.
    right.respond({
      ok: false,
      stepId: right.value.stepId,
      error: { code: 'worker_stopped', message: 'the worker stopped' },
      usage,
      turns: 1,
    } as AgentStepReply);
    await bus.settled();
    ok(left, 'planned', { toldRead: ['m-1'] });
    await bus.settled();
    clock.advance(5_000);
    const again = await next('task-23.build.1');
    expect(again.value.told?.map((m) => m.id)).toEqual(['m-1']);
    ok(again, 'built', { toldRead: ['m-1'] });
    await task.handled;
  });

  it('takes a tell again with the same key once: the same message id, no second message or task.told', async () => {
    const { intake, control, next, record, bus } = await setUp(twoSteps);
    const task = intake.deliver({ id: 'task-24', goal: 'build it' });
    const plan = await next('task-24.plan.1');
    const tell = { action: 'tell', text: 'use v2', key: 'k-1' };
    expect(await control('task-24', tell)).toMatchObject({ outcome: 'told', messageId: 'm-1' });
    // The sender heard nothing in time and asks again: the answer it lost, and nothing told twice.
    expect(await control('task-24', tell)).toEqual({
      ok: true,
      taskId: 'task-24',
      outcome: 'told',
      messageId: 'm-1',
    });
    // Another key is another message, even with the same text; so is a tell with no key.
    expect(await control('task-24', { ...tell, key: 'k-2' })).toMatchObject({ messageId: 'm-2' });
    expect(await control('task-24', { action: 'tell', text: 'use v2' })).toMatchObject({ messageId: 'm-3' });
    const written = await record('task-24');
    expect(written?.told?.map((m) => m.id)).toEqual(['m-1', 'm-2', 'm-3']);
    expect(written?.toldKeys).toEqual([
      { key: 'k-1', messageId: 'm-1' },
      { key: 'k-2', messageId: 'm-2' },
    ]);
    expect(bus.eventsOf('task.told').map((e) => e.data.messageId)).toEqual(['m-1', 'm-2', 'm-3']);
    ok(plan, 'planned', { toldRead: ['m-1', 'm-2', 'm-3'] });
    // Read already: a retry is still answered with its id, and given to no step.
    expect(await control('task-24', tell)).toMatchObject({ messageId: 'm-1' });
    const build = await next('task-24.build.1');
    expect(build.value.told).toBeUndefined();
    ok(build);
    await task.handled;
  });

  it('knows a tell key after a restart from the record: the retry to the new coordinator tells nothing new', async () => {
    const first = await setUp(twoSteps);
    const task = first.intake.deliver({ id: 'task-25', goal: 'build it' });
    await first.next('task-25.plan.1');
    const tell = { action: 'tell', text: 'use v2', key: 'k-1' };
    expect(await first.control('task-25', tell)).toMatchObject({ messageId: 'm-1' });
    // The coordinator stops (its answer lost, say); another takes the task from its record.
    await first.runner.stop();
    await task.handled;
    const lease = (await first.record('task-25'))?.lease;
    const { intake } = await startRunner(first, twoSteps);
    const again = intake.deliver(
      { id: 'task-25', goal: 'build it' },
      { streamSequence: task.delivery.streamSequence, deliveryCount: 2 },
    );
    await expect.poll(async () => (await first.record('task-25'))?.lease).not.toBe(lease);
    const plan = await first.next('task-25.plan.1');
    expect(await first.control('task-25', tell)).toMatchObject({ outcome: 'told', messageId: 'm-1' });
    expect((await first.record('task-25'))?.told?.map((m) => m.id)).toEqual(['m-1']);
    // One message told, whose event the restored run published again under its id (steeringRestore.test.ts).
    expect(new Set(first.bus.eventsOf('task.told').map((event) => event.id)).size).toBe(1);
    expect(await first.control('task-25', { ...tell, key: 'k-2' })).toMatchObject({ messageId: 'm-2' });
    ok(plan, 'planned', { toldRead: ['m-1', 'm-2'] });
    ok(await first.next('task-25.build.1'));
    await again.handled;
  });

  it('takes a message while paused: the step sent on resume has it', async () => {
    const { intake, control, next } = await setUp(twoSteps);
    const task = intake.deliver({ id: 'task-12', goal: 'build it' });
    const plan = await next('task-12.plan.1');
    await control('task-12', { action: 'pause' });
    paused(plan);
    await control('task-12', { action: 'tell', text: 'use v2' });
    await control('task-12', { action: 'resume' });
    const again = await next('task-12.plan.1');
    expect(again.value.told?.map((m) => m.text)).toEqual(['use v2']);
    ok(again, 'planned', { toldRead: ['m-1'] });
    ok(await next('task-12.build.1'));
    await task.handled;
  });
});

describe('a sub-task', () => {
  it('is paused with its parent and resumed with it, over its control subject', async () => {
    const config = pipeline([
      { id: 'sub', kind: 'pipeline', pipeline: 'outline' },
      { id: 'build', kind: 'agent', agent: 'builder' },
    ]);
    let subTask = '';
    let finish: (output: PipelineRunOutput) => void = () => {};
    const { intake, control, next, bus } = await setUp(config, {
      subPipelines: (input) => {
        subTask = input.task.id;
        return new Promise((resolve) => (finish = resolve));
      },
    });
    const told: ControlMessage[] = [];
    bus.subscribe(subjects.allControl, ControlMessage, (delivery) => {
      if (!delivery.subject.endsWith(subTask)) return;
      told.push(delivery.value);
      delivery.respond({
        ok: true,
        taskId: subTask,
        outcome: delivery.value.action === 'pause' ? 'paused' : 'resumed',
      });
    });
    const task = intake.deliver({ id: 'task-13', goal: 'outline it' });
    await expect.poll(() => subTask).not.toBe('');
    await control('task-13', { action: 'pause', by: 'ann' });
    await expect.poll(() => told.map((m) => m.action)).toEqual(['pause']);
    expect(told[0]).toMatchObject({ by: 'task task-13' });
    await control('task-13', { action: 'resume' });
    await expect.poll(() => told.map((m) => m.action)).toEqual(['pause', 'resume']);
    finish({ ok: true, output: 'outlined', usage, durationMs: 1 });
    ok(await next('task-13.build.1'));
    await task.handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
  });

  it('is resumed with its parent restored held on another coordinator, which sent it no pause', async () => {
    const config = pipeline([{ id: 'sub', kind: 'pipeline', pipeline: 'outline' }]);
    let subTask = '';
    const first = await setUp(config, {
      subPipelines: (input) => {
        subTask = input.task.id;
        return new Promise(() => {});
      },
    });
    const told: string[] = [];
    first.bus.subscribe(subjects.allControl, ControlMessage, (delivery) => {
      if (subTask === '' || !delivery.subject.endsWith(subTask)) return;
      told.push(delivery.value.action);
      const action = delivery.value.action;
      delivery.respond({ ok: true, taskId: subTask, outcome: action === 'pause' ? 'paused' : 'resumed' });
    });
    const task = first.intake.deliver({ id: 'task-20', goal: 'outline it' });
    await expect.poll(() => subTask).not.toBe('');
    await first.control('task-20', { action: 'pause' });
    await expect.poll(() => told).toEqual(['pause']);
    // Its coordinator stops (the sub-task runs on, paused); another takes the parent from its record, held.
    await first.runner.stop();
    await task.handled;
    const lease = (await first.record('task-20'))?.lease;
    let finish: (output: PipelineRunOutput) => void = () => {};
    const intake = new MemoryTaskIntake();
    running.push(
      await startPipelineRunner({
        bus: first.bus,
        intake,
        config,
        store: first.store,
        logger: createLogger({ level: 'silent' }),
        clock: first.clock,
        concurrency: 4,
        subPipelines: () => new Promise((resolve) => (finish = resolve)),
      }),
    );
    const again = intake.deliver(
      { id: 'task-20', goal: 'outline it' },
      { streamSequence: task.delivery.streamSequence, deliveryCount: 2 },
    );
    await expect.poll(async () => (await first.record('task-20'))?.lease).not.toBe(lease);
    await first.bus.settled();
    await first.control('task-20', { action: 'resume' });
    // The sub-task, paused by the first run, goes on with its parent: else both wait for ever.
    await expect.poll(() => told).toEqual(['pause', 'resume']);
    finish({ ok: true, output: 'outlined', usage, durationMs: 1 });
    await again.handled;
    expect(first.bus.eventsOf('task.completed')).toHaveLength(1);
  });

  it('is not submitted while its parent is paused, and is once the parent is resumed', async () => {
    const config = pipeline([
      { id: 'plan', kind: 'agent', agent: 'planner' },
      { id: 'sub', kind: 'pipeline', pipeline: 'outline' },
    ]);
    const submitted: string[] = [];
    const { intake, control, next, bus, clock } = await setUp(config, {
      subPipelines: async (input) => {
        submitted.push(input.task.id);
        return { ok: true, output: 'outlined', usage, durationMs: 1 };
      },
    });
    const task = intake.deliver({ id: 'task-14', goal: 'outline it' });
    const plan = await next('task-14.plan.1');
    await control('task-14', { action: 'pause' });
    ok(plan);
    await bus.settled();
    clock.advance(HOUR);
    await bus.settled();
    expect(submitted).toEqual([]);
    await control('task-14', { action: 'resume' });
    await task.handled;
    expect(submitted).toHaveLength(1);
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
  });
});
