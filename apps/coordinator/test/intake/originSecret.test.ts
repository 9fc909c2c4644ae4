import { emptyUsage, type TaskSubmission } from '@troupe/protocol';
import { redactDeep } from '@troupe/runtime';
import { describe, expect, it } from 'vitest';
import { claim } from '../../src/intake/claim.ts';
import { intakeServices, triagedTask } from './taskServices.ts';

/** A provider key: events show it as `[redacted]`, whatever field holds it. */
const KEY = 'sk-proj-0123456789abcdefABCDEF';
const INPUT = { ticket: 'T-1', apiKey: KEY, repo: 'https://bot:hunter2pass@git.example.com/x.git' };

/**
 * An ended task `orig` given {@link INPUT}: its step `plan` completed and its step `ship` started, then it failed.
 * `checkpointed` gives its record the workflow's snapshot, as every checkpoint of a task that ran writes it (the
 * context's `task` is the workflow's input as claimed); without, the record is as its claim left it.
 */
async function endedOrigin(setup: ReturnType<typeof intakeServices>, checkpointed: boolean) {
  const { services, store, bus } = setup;
  const first = await claim(services, triagedTask({ id: 'orig', goal: 'ship it', input: INPUT }));
  if (first.next !== 'run') throw new Error(`claimed as ${first.next}`);
  const entry = await store.get('orig');
  if (!entry) throw new Error('no record');
  const snapshot = { status: 'done', value: 'failed', context: { task: first.claimed.input, round: 1 } };
  await store.update(
    'orig',
    { ...entry.value, status: 'failed', ...(checkpointed ? { snapshot } : {}) },
    entry.revision,
  );
  const scope = { pipeline: 'unit', taskId: 'orig', traceparent: first.claimed.input.traceparent };
  const plan = { step: 'plan', agent: 'planner', round: 1, stepId: 'orig.plan.1' };
  await bus.publishEvent(services.events.make('step.started', scope, plan));
  await bus.publishEvent(
    services.events.make('step.completed', scope, {
      ...plan,
      ok: true,
      output: 'the plan',
      usage: emptyUsage(),
      turns: 1,
      durationMs: 1,
    }),
  );
  const ship = { step: 'ship', agent: 'planner', round: 1, stepId: 'orig.ship.1' };
  await bus.publishEvent(services.events.make('step.started', scope, ship));
  await bus.settled();
}

/** A restart of `orig` at `ship` as any NATS client may publish it. */
const restart = (id: string, input: Record<string, unknown>): TaskSubmission => ({
  id,
  goal: 'ship it',
  input,
  origin: { taskId: 'orig', kind: 'restart', step: 'ship' },
});

describe("a restart's claim compares its input with its origin's real one, not task.accepted's redacted copy", () => {
  it('accepts a restart carrying the real secret, and runs it with it', async () => {
    const setup = intakeServices();
    await endedOrigin(setup, true);
    const accepted = setup.bus.eventsOf('task.accepted').find((e) => e.taskId === 'orig');
    // The premise: the origin's event does not hold the key.
    expect(JSON.stringify(accepted?.data.input)).not.toContain(KEY);
    const result = await claim(setup.services, triagedTask(restart('again', INPUT)));
    expect(result.next).toBe('run');
    if (result.next !== 'run') return;
    expect(result.claimed.input.input).toEqual(INPUT);
    expect(Object.values(result.claimed.input.reuse ?? {}).map((r) => r.step)).toEqual(['plan']);
  });

  it('refuses a restart carrying the redacted copy, which is not what the origin ran with', async () => {
    const setup = intakeServices();
    await endedOrigin(setup, true);
    // What a restart built from task.accepted carried: the key and the URL's password as `[redacted]`.
    const redacted = redactDeep(INPUT);
    expect(redacted.apiKey).toBe('[redacted]');
    const result = await claim(setup.services, triagedTask(restart('redacted', redacted)));
    expect(result.next).not.toBe('run');
    expect(JSON.stringify(result)).toContain('input differ');
  });

  it('compares by the redacted event when the record keeps no snapshot, taking the real secret as the same', async () => {
    const setup = intakeServices();
    await endedOrigin(setup, false);
    const result = await claim(setup.services, triagedTask(restart('bare', INPUT)));
    expect(result.next).toBe('run');
  });
});
