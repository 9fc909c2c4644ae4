import { type AgentStepReply, MAX_TOLD_KEYS } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { TaskSteering } from '../src/task/taskSteering.ts';
import { forwardKey } from '../src/workflow/subTaskSteering.ts';
import { ok, pipeline, type Step, setUp, startRunner, usage } from './support/steeringRunner.ts';

const AT = '2026-01-01T00:00:00.000Z';

/** A failure the workflow's `retry` runs the step again for (not a call's own retryable one). */
const failed = (step: Step, extra: Partial<AgentStepReply> = {}) =>
  step.respond({
    ok: false,
    stepId: step.value.stepId,
    error: { code: 'model_error', message: 'the model failed' },
    usage,
    turns: 1,
    ...extra,
  } as AgentStepReply);

describe('a tell to a step the workflow retries', () => {
  const config = pipeline([
    {
      id: 'both',
      kind: 'parallel',
      branches: {
        left: [{ id: 'plan', kind: 'agent', agent: 'planner' }],
        right: [{ id: 'build', kind: 'agent', agent: 'builder', retry: { max: 1, backoff: 1 } }],
      },
    },
  ]);

  it('gives the retry the message its failed run was owed, though a parallel branch read it', async () => {
    const { intake, control, next, clock, bus, record } = await setUp(config);
    const task = intake.deliver({ id: 'task-t1', goal: 'both' });
    const plan = await next('task-t1.plan.1');
    const build = await next('task-t1.build.1');
    await control('task-t1', { action: 'tell', text: 'use v2' });
    // The left branch reads it; the right one, at work when it was told, fails (its read, if any, does not count).
    ok(plan, 'planned', { toldRead: ['m-1'] });
    await expect
      .poll(async () => (await record('task-t1'))?.toldOwed?.[0]?.steps)
      .toEqual(['task-t1.build.1']);
    failed(build, { toldRead: ['m-1'] });
    await bus.settled();
    // The turn after, in which the steering settles what the failed run's end leaves owed.
    await new Promise((resolve) => setImmediate(resolve));
    clock.advance(1_000);
    const retried = await next('task-t1.build.1-r1');
    expect(retried.value.told?.map((m) => m.text)).toEqual(['use v2']);
    ok(retried, 'built', { toldRead: ['m-1'] });
    await task.handled;
    expect((await record('task-t1'))?.told).toBeUndefined();
  });

  it('gives it the message after a restore while it waits to be retried', async () => {
    const first = await setUp(config);
    const { control, next, clock, bus, record, store } = first;
    const payload = { id: 'task-t2', goal: 'both' };
    const task = first.intake.deliver(payload);
    const plan = await next('task-t2.plan.1');
    const build = await next('task-t2.build.1');
    await control('task-t2', { action: 'tell', text: 'use v2' });
    ok(plan, 'planned', { toldRead: ['m-1'] });
    failed(build);
    // Checkpointed waiting to retry it, the message still owed to it.
    await expect.poll(async () => (await record('task-t2'))?.state).toContain('retry:build');
    await bus.settled();
    expect((await record('task-t2'))?.toldOwed).toEqual([{ messageId: 'm-1', steps: ['task-t2.build.1'] }]);

    // Its coordinator dies; another takes the task over from its record (another delivery of its message).
    await first.runner.stop();
    await task.handled;
    const lease = (await record('task-t2'))?.lease;
    const { intake } = await startRunner({ bus, store, clock }, config);
    const again = intake.deliver(payload, { streamSequence: task.delivery.streamSequence, deliveryCount: 2 });
    await expect.poll(async () => (await record('task-t2'))?.lease).not.toBe(lease);
    await bus.settled();
    clock.advance(1_000);
    const retried = await next('task-t2.build.1-r1');
    expect(retried.value.told?.map((m) => m.text)).toEqual(['use v2']);
    ok(retried, 'built', { toldRead: ['m-1'] });
    await again.handled;
    expect((await record('task-t2'))?.told).toBeUndefined();
  });
});

describe('a task that ends as its last branch ends', () => {
  it('keeps in its final record no message a branch read and the others ended without', async () => {
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
    const { intake, control, next, record } = await setUp(config);
    const task = intake.deliver({ id: 'task-t3', goal: 'both' });
    const plan = await next('task-t3.plan.1');
    const build = await next('task-t3.build.1');
    await control('task-t3', { action: 'tell', text: 'use v2' });
    ok(plan, 'planned', { toldRead: ['m-1'] });
    await expect
      .poll(async () => (await record('task-t3'))?.toldOwed?.[0]?.steps)
      .toEqual(['task-t3.build.1']);
    // The other branch ends without reading it, and the task with it: nobody owes it any more.
    ok(build);
    await task.handled;
    const ended = await record('task-t3');
    expect(ended?.status).toBe('completed');
    expect(ended?.told).toBeUndefined();
    expect(ended?.toldOwed).toBeUndefined();
  });
});

describe("a sub-task's memory of the keys its parent forwarded with", () => {
  it('outlasts a hundred keyed tells from people, so a restored parent forwarding again tells nothing twice', () => {
    const steering = new TaskSteering();
    const forwarded = steering.tell('use v2', AT, 'ann', forwardKey('task-1', 'm-1'));
    steering.read([forwarded.id], 'task-1.sub.1.draft.1');
    // People tell the sub-task itself, each tell with a key of its own (troupe tell makes one).
    for (let i = 0; i < MAX_TOLD_KEYS; i++) {
      const told = steering.tell(`note ${i}`, AT, undefined, `key-${i}`);
      steering.read([told.id], 'task-1.sub.1.draft.1');
    }
    expect(steering.toldWith(forwardKey('task-1', 'm-1'))).toBe(forwarded.id);
    expect(new TaskSteering(steering.fields()).toldWith(forwardKey('task-1', 'm-1'))).toBe(forwarded.id);
    // People's own keys are kept as before: their newest hundred.
    expect(steering.toldWith('key-0')).toBe('m-2');
    steering.tell('one more', AT, undefined, 'key-new');
    expect(steering.toldWith('key-0')).toBeUndefined();
    expect(steering.toldWith(forwardKey('task-1', 'm-1'))).toBe(forwarded.id);
  });
});
