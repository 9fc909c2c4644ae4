import { emptyUsage } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { PipelineConfig } from '../../src/config/pipelineSchema.ts';
import { claim } from '../../src/intake/claim.ts';
import { triage } from '../../src/intake/triage.ts';
import { config, deliveryOf, intakeServices, triagedTask, V1 } from './taskServices.ts';

/** An ended task `orig` whose step `plan` completed: what a restart or fork of it reads, through the intake. */
async function endedOrigin(setup: ReturnType<typeof intakeServices>) {
  const { services, store, bus } = setup;
  const first = await claim(services, triagedTask({ id: 'orig', goal: 'plan it' }));
  if (first.next !== 'run') throw new Error(`claimed as ${first.next}`);
  const entry = await store.get('orig');
  if (!entry) throw new Error('no record');
  await store.update('orig', { ...entry.value, status: 'failed' }, entry.revision);
  const scope = { pipeline: 'unit', taskId: 'orig', traceparent: first.claimed.input.traceparent };
  const ref = { step: 'plan', agent: 'planner', round: 1, stepId: 'orig.plan.1' };
  await bus.publishEvent(services.events.make('step.started', scope, ref));
  await bus.publishEvent(
    services.events.make('step.completed', scope, {
      ...ref,
      ok: true,
      output: 'the plan',
      usage: emptyUsage(),
      turns: 1,
      durationMs: 1,
    }),
  );
  await bus.settled();
}

describe('claiming a task', () => {
  it('creates the record of a new task under a lease of its own, and announces it', async () => {
    const { services, store, bus } = intakeServices();
    const result = await claim(services, triagedTask({ id: 'task-1', goal: 'plan it' }));
    if (result.next !== 'run') throw new Error(`claimed as ${result.next}`);
    const { claimed, flow } = result;
    expect(flow.hash).toBe(V1);
    expect(claimed).toMatchObject({ firstDelivery: true, snapshot: undefined, version: V1 });
    const record = (await store.get('task-1'))?.value;
    expect(record).toMatchObject({
      status: 'running',
      state: 'plan',
      lease: claimed.lease.token,
      version: V1,
      delivery: { progress: 0, stalls: 0 },
    });
    expect(claimed.lease.revision).toBe((await store.get('task-1'))?.revision);
    await bus.settled();
    expect(bus.eventsOf('task.accepted')).toEqual([
      expect.objectContaining({ taskId: 'task-1', data: expect.objectContaining({ goal: 'plan it' }) }),
    ]);
  });

  it('acks a resubmission whose id another stream message took first', async () => {
    const { services } = intakeServices();
    await claim(services, triagedTask({ id: 'task-1', goal: 'first' }, { streamSequence: 1 }));
    expect(
      await claim(services, triagedTask({ id: 'task-1', goal: 'again' }, { streamSequence: 2 })),
    ).toEqual({
      next: 'ack',
    });
  });

  it('goes on with its own create whose reply was lost, and hands back when another run took the record since', async () => {
    const { services, store } = intakeServices();
    const create = store.create.bind(store);
    // The write lands, its reply does not: the store finds the key there and says it was not created.
    store.create = async (key, value) => {
      await create(key, value);
      return undefined;
    };
    const ours = await claim(services, triagedTask({ id: 'task-1', goal: 'g' }));
    if (ours.next !== 'run') throw new Error(`claimed as ${ours.next}`);
    const entry = await store.get('task-1');
    expect(entry?.value.lease).toBe(ours.claimed.lease.token);
    expect(ours.claimed.lease.revision).toBe(entry?.revision);
    // Same stream message, but the record bears another run's lease: that run owns the task now.
    store.create = async (key, value) => {
      await create(key, { ...value, lease: 'another-run' });
      return undefined;
    };
    expect(await claim(services, triagedTask({ id: 'task-2', goal: 'g' }))).toEqual({ next: 'handBack' });
  });

  it('hands back a task claimed as the runner stops, marked handed back (no stall)', async () => {
    const { services, store, stop } = intakeServices();
    const claiming = claim(services, triagedTask({ id: 'task-1', goal: 'g' }));
    stop();
    expect(await claiming).toEqual({ next: 'handBack' });
    expect((await store.get('task-1'))?.value.delivery).toMatchObject({ handedBack: true });
  });

  it('resumes a task from its record under a new lease, and hands back when the record changed meanwhile', async () => {
    const { services, store } = intakeServices();
    const first = await claim(services, triagedTask({ id: 'task-1', goal: 'g' }));
    if (first.next !== 'run') throw new Error(`claimed as ${first.next}`);
    const entry = await store.get('task-1');
    const again = { ...triagedTask({ id: 'task-1', goal: 'g' }, { deliveryCount: 2 }), entry };
    const resumed = await claim(services, again);
    if (resumed.next !== 'run') throw new Error(`resumed as ${resumed.next}`);
    expect(resumed.claimed.firstDelivery).toBe(false);
    expect(resumed.claimed.lease.token).not.toBe(first.claimed.lease.token);
    expect((await store.get('task-1'))?.value.lease).toBe(resumed.claimed.lease.token);
    // Read before that claim: the record has moved on, so this delivery lost the race.
    expect(await claim(services, again)).toEqual({ next: 'handBack' });
  });

  it('fails a claimed task whose checkpoint does not fit its version, saying so', async () => {
    const { services, store } = intakeServices();
    await claim(services, triagedTask({ id: 'task-1', goal: 'g' }));
    const entry = await store.get('task-1');
    if (!entry) throw new Error('no record');
    const unfit = {
      ...entry.value,
      snapshot: { status: 'active', value: 'no-such-step', context: {}, children: {} },
    };
    const revision = await store.update('task-1', unfit, entry.revision);
    const task = {
      ...triagedTask({ id: 'task-1', goal: 'g' }, { deliveryCount: 2 }),
      entry: { ...entry, value: unfit, revision: revision ?? 0 },
    };
    const result = await claim(services, task);
    expect(result).toMatchObject({
      next: 'fail',
      message: expect.stringMatching(
        /^task task-1 cannot resume: its checkpoint does not fit version aaaaaaaaaaaa/,
      ),
    });
  });

  it('fails a claimed task whose version is not stored, naming it', async () => {
    const { services, store } = intakeServices({ load: async () => undefined });
    await claim(services, triagedTask({ id: 'task-1', goal: 'g' }));
    const entry = await store.get('task-1');
    if (!entry) throw new Error('no record');
    const gone = { ...entry.value, version: 'b'.repeat(64) };
    const revision = await store.update('task-1', gone, entry.revision);
    const task = {
      ...triagedTask({ id: 'task-1', goal: 'g' }, { deliveryCount: 2 }),
      entry: { ...entry, value: gone, revision: revision ?? 0 },
    };
    expect(await claim(services, task)).toMatchObject({
      next: 'fail',
      message: expect.stringMatching(/^task task-1 cannot resume: .*bbbbbbbbbbbb/),
    });
  });

  it('says a sub-task whose parent has ended is to be cancelled as soon as it runs', async () => {
    const { services, store } = intakeServices();
    await claim(services, triagedTask({ id: 'parent-1', goal: 'the parent' }));
    const entry = await store.get('parent-1');
    if (!entry) throw new Error('no record');
    await store.update(
      'parent-1',
      { ...entry.value, status: 'cancelled', state: 'cancelled' },
      entry.revision,
    );
    const parent = { taskId: 'parent-1', pipeline: 'unit', step: 'sub', depth: 1 };
    const result = await claim(services, triagedTask({ id: 'child-1', goal: 'the child', parent }));
    expect(result).toMatchObject({
      next: 'run',
      claimed: { orphaned: 'its parent task parent-1 cancelled' },
    });
  });

  it("reads a restart's origin through the intake, the bus being any bus, and keeps what it reuses in the input", async () => {
    const setup = intakeServices();
    await endedOrigin(setup);
    const fork = await claim(
      setup.services,
      triagedTask({ id: 'fork-1', goal: 'plan it', origin: { taskId: 'orig', kind: 'fork', step: 'plan' } }),
    );
    if (fork.next !== 'run') throw new Error(`claimed as ${fork.next}`);
    expect(fork.claimed.input.origin).toMatchObject({ taskId: 'orig', kind: 'fork', step: 'plan' });
    expect(fork.claimed.input.reuse).toEqual({});
    expect(fork.claimed.version).toBe(V1);
    // The origin's events say which steps it started.
    expect(
      await claim(
        setup.services,
        triagedTask({
          id: 'fork-2',
          goal: 'plan it',
          origin: { taskId: 'orig', kind: 'fork', step: 'ship' },
        }),
      ),
    ).toMatchObject({ next: 'fail', message: expect.stringContaining('its steps that started: plan') });
  });

  it("throws when its origin's record or events cannot be read now, so the delivery comes again, and does not fail the task", async () => {
    const setup = intakeServices();
    await endedOrigin(setup);
    const { services, store } = setup;
    const get = store.get.bind(store);
    store.get = async (key) => {
      if (key === 'orig') throw new Error('kv: request timed out');
      return await get(key);
    };
    const restart = () =>
      claim(
        services,
        triagedTask({
          id: 'again-1',
          goal: 'plan it',
          origin: { taskId: 'orig', kind: 'restart', step: 'plan' },
        }),
      );
    await expect(restart()).rejects.toThrow('timed out');
    store.get = get;
    services.taskEvents = async () => {
      throw new Error('EVENTS: request timed out');
    };
    await expect(restart()).rejects.toThrow('timed out');
    expect(await store.get('again-1')).toBeUndefined();
  });

  it("checks a restart's or fork's input against its origin's version's schema, not the newest's", async () => {
    const OLD = 'b'.repeat(64);
    const withInput = (input: Record<string, unknown>) => PipelineConfig.parse({ ...config, input });
    const needs = (field: string, type: string) => ({
      type: 'object',
      properties: { [field]: { type } },
      required: [field],
    });
    const setup = intakeServices({
      config: withInput(needs('ticket', 'string')),
      load: async (hash) => (hash === OLD ? withInput(needs('n', 'number')) : undefined),
    });
    await endedOrigin(setup);
    const { services, store } = setup;
    const entry = await store.get('orig');
    if (!entry) throw new Error('no record');
    await store.update('orig', { ...entry.value, version: OLD }, entry.revision);
    const fork = (id: string, input: Record<string, unknown>) => ({
      id,
      goal: 'plan it',
      input,
      origin: { taskId: 'orig', kind: 'fork' as const, step: 'plan' },
    });
    // No ticket, which the newest version asks for: triage leaves it to the claim, on the origin's version.
    expect(await triage(services, deliveryOf(fork('fork-ok', { n: 1 })))).toMatchObject({ next: 'claim' });
    const ok = await claim(services, triagedTask(fork('fork-ok', { n: 1 })));
    expect(ok).toMatchObject({ next: 'run', claimed: { version: OLD } });
    expect(await claim(services, triagedTask(fork('fork-bad', { n: 'one' })))).toMatchObject({
      next: 'fail',
      message: expect.stringContaining(
        "task fork-bad cannot start: its input does not fit its version's input schema",
      ),
    });
  });
});
