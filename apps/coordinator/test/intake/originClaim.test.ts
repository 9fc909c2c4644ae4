import { emptyUsage, type TaskSubmission } from '@troupe/protocol';
import { ValueStoreError } from '@troupe/runtime';
import { describe, expect, it } from 'vitest';
import { claim } from '../../src/intake/claim.ts';
import { intakeServices, triagedTask } from './taskServices.ts';

const INPUT = { ticket: 'T-1', body: 'the long text' };

/**
 * An ended task `orig` with input {@link INPUT}: its step `plan` completed, a person answered its `approve` step
 * (agent `human`), and its step `ship` started, then it failed.
 */
async function endedOrigin(
  setup: ReturnType<typeof intakeServices>,
  submission: Partial<TaskSubmission> = {},
) {
  const { services, store, bus } = setup;
  const first = await claim(
    services,
    triagedTask({ id: 'orig', goal: 'ship it', input: INPUT, ...submission }),
  );
  if (first.next !== 'run') throw new Error(`claimed as ${first.next}`);
  const entry = await store.get('orig');
  if (!entry) throw new Error('no record');
  await store.update('orig', { ...entry.value, status: 'failed' }, entry.revision);
  const scope = { pipeline: 'unit', taskId: 'orig', traceparent: first.claimed.input.traceparent };
  for (const [step, agent, output] of [
    ['plan', 'planner', 'the plan'],
    ['approve', 'human', 'yes, ship it'],
  ] as const) {
    const ref = { step, agent, round: 1, stepId: `orig.${step}.1` };
    await bus.publishEvent(services.events.make('step.started', scope, ref));
    await bus.publishEvent(
      services.events.make('step.completed', scope, {
        ...ref,
        ok: true,
        output,
        usage: emptyUsage(),
        turns: 1,
        durationMs: 1,
      }),
    );
  }
  const ship = { step: 'ship', agent: 'shipper', round: 1, stepId: 'orig.ship.1' };
  await bus.publishEvent(services.events.make('step.started', scope, ship));
  await bus.settled();
}

/** A fork of `orig` at `ship` as any NATS client may publish it: no `edited`, whatever it changed. */
function fork(id: string, changes: Partial<TaskSubmission> = {}): TaskSubmission {
  return {
    id,
    goal: 'ship it',
    input: INPUT,
    origin: { taskId: 'orig', kind: 'fork', step: 'ship' },
    ...changes,
  };
}

async function claimed(setup: ReturnType<typeof intakeServices>, submission: TaskSubmission) {
  const result = await claim(setup.services, triagedTask(submission));
  if (result.next !== 'run') throw new Error(`claimed as ${result.next}`);
  return result.claimed.input;
}

const reusedSteps = (input: { reuse?: Record<string, { step: string }> }) =>
  Object.values(input.reuse ?? {}).map((reused) => reused.step);

describe("a restart's or fork's claim compares it with its origin", () => {
  it("reuses a person's answer for a fork with the original's goal and input", async () => {
    const setup = intakeServices();
    await endedOrigin(setup);
    // Its keys in another order: the same input.
    const input = await claimed(setup, fork('same', { input: { body: INPUT.body, ticket: 'T-1' } }));
    expect(reusedSteps(input)).toEqual(['plan', 'approve']);
    expect(input.origin).not.toHaveProperty('edited');
  });

  it('asks the person again for a fork published with a new input and no edited, and records the input as edited', async () => {
    const setup = intakeServices();
    await endedOrigin(setup);
    const input = await claimed(setup, fork('new-input', { input: { ...INPUT, ticket: 'T-2' } }));
    expect(reusedSteps(input)).toEqual(['plan']);
    expect(input.origin).toMatchObject({ kind: 'fork', edited: ['input'] });
    expect((await setup.store.get('new-input'))?.value.origin).toMatchObject({ edited: ['input'] });
    const accepted = setup.bus.events.find((e) => e.taskId === 'new-input' && e.kind === 'task.accepted');
    expect(accepted?.data).toMatchObject({ origin: { edited: ['input'] } });
  });

  it('asks the person again for a fork with a new goal, or with no input where the original had one', async () => {
    const setup = intakeServices();
    await endedOrigin(setup);
    const goal = await claimed(setup, fork('new-goal', { goal: 'ship it to everyone' }));
    expect(reusedSteps(goal)).toEqual(['plan']);
    expect(goal.origin).toMatchObject({ edited: ['goal'] });
    const { input: _input, ...noInput } = fork('no-input');
    const none = await claimed(setup, noInput);
    expect(reusedSteps(none)).toEqual(['plan']);
    expect(none.origin).toMatchObject({ edited: ['input'] });
  });

  it('keeps what the submitter said it edited beside what the claim found', async () => {
    const setup = intakeServices();
    await endedOrigin(setup);
    const input = await claimed(
      setup,
      fork('both', {
        goal: 'ship it now',
        origin: { taskId: 'orig', kind: 'fork', step: 'ship', edited: ['input'] },
      }),
    );
    expect(input.origin).toMatchObject({ edited: ['input', 'goal'] });
    expect(reusedSteps(input)).toEqual(['plan']);
  });

  it('keeps what its first claim found the fork edited when it resumes from a checkpoint', async () => {
    const setup = intakeServices();
    await endedOrigin(setup);
    const submission = fork('resumed-fork', { input: { ...INPUT, ticket: 'T-2' } });
    expect((await claimed(setup, submission)).origin).toMatchObject({ edited: ['input'] });
    const entry = await setup.store.get('resumed-fork');
    if (!entry) throw new Error('no record');
    // Checkpointed, then its coordinator died: the next delivery resumes it, and does not claim its origin again.
    const checkpointed = {
      ...entry.value,
      snapshot: { status: 'active', value: 'ship', context: {}, children: {} },
    };
    const revision = await setup.store.update('resumed-fork', checkpointed, entry.revision);
    const resumed = await claim(setup.services, {
      ...triagedTask(submission, { deliveryCount: 2 }),
      entry: { ...entry, value: checkpointed, revision: revision ?? 0 },
    });
    if (resumed.next === 'ack' || resumed.next === 'handBack') throw new Error(`resumed as ${resumed.next}`);
    // What every record write of the resumed run carries (taskRecord.ts recordOf).
    expect(resumed.claimed.input.origin).toMatchObject({ kind: 'fork', edited: ['input'] });
  });

  it('records a changed goal among as many edits as a record holds, when the submitter listed that many already', async () => {
    const setup = intakeServices();
    await endedOrigin(setup);
    // What any NATS client may publish: 64 entries, the most an origin's edited holds.
    const listed = Array.from({ length: 64 }, (_, i) => `steps.s${i}.output`);
    const input = await claimed(
      setup,
      fork('many-edits', {
        goal: 'ship it now',
        origin: { taskId: 'orig', kind: 'fork', step: 'ship', edited: listed },
      }),
    );
    expect(input.origin?.edited).toHaveLength(64);
    expect(input.origin?.edited).toContain('goal');
    expect(reusedSteps(input)).toEqual(['plan']);
    expect((await setup.store.get('many-edits'))?.value.origin?.edited).toContain('goal');
  });

  it('refuses a restart with another input, since a restart runs the original as it was', async () => {
    const setup = intakeServices();
    await endedOrigin(setup);
    const restart = {
      ...fork('restart-new', { input: { ...INPUT, ticket: 'T-9' } }),
      origin: { taskId: 'orig', kind: 'restart' as const, step: 'ship' },
    };
    expect(await claim(setup.services, triagedTask(restart))).toMatchObject({
      next: 'fail',
      message: expect.stringContaining(
        "cannot restart task orig: a restart runs with the original's goal and input, and this one's input differ from it; to run with another, publish it as a fork",
      ),
    });
    const same = { ...restart, id: 'restart-same', input: INPUT };
    expect(reusedSteps(await claimed(setup, same))).toEqual(['plan', 'approve']);
  });

  it("refuses a restart or fork whose origin's task.accepted is gone, since nothing shows what its people were asked about", async () => {
    const setup = intakeServices();
    await endedOrigin(setup);
    // EVENTS keeps events by age: the oldest, task.accepted, goes first, while the steps' events are still kept.
    const accepted = setup.bus.events.findIndex((e) => e.taskId === 'orig' && e.kind === 'task.accepted');
    setup.bus.events.splice(accepted, 1);
    const refused = {
      next: 'fail',
      message: expect.stringContaining(
        "its task.accepted is gone from EVENTS, so what it was given to do cannot be compared with this one's",
      ),
    };
    expect(
      await claim(
        setup.services,
        triagedTask(fork('gone-new-input', { input: { ...INPUT, ticket: 'T-2' } })),
      ),
    ).toMatchObject(refused);
    const restart = {
      ...fork('gone-restart'),
      origin: { taskId: 'orig', kind: 'restart' as const, step: 'ship' },
    };
    expect(await claim(setup.services, triagedTask(restart))).toMatchObject(refused);
  });

  it('compares inputs cut to previews by their stored wholes, and takes one whose whole is gone as changed', async () => {
    const setup = intakeServices();
    const ref = (sha: string) => ({
      bucket: 'troupe-inputs-unit',
      name: `x.input.${sha.slice(0, 8)}`,
      bytes: 100,
      sha256: sha.repeat(64),
    });
    const stored: Record<string, string> = {
      [ref('1').name]: JSON.stringify(INPUT),
      // The same input stored again, by a client that writes JSON otherwise.
      [ref('2').name]: JSON.stringify({ body: INPUT.body, ticket: 'T-1' }, null, 2),
      [ref('3').name]: JSON.stringify({ ...INPUT, body: 'another text' }),
    };
    setup.services.values = {
      read: async ({ name }) => {
        const text = stored[name];
        if (text === undefined) throw new ValueStoreError('value_missing', `no object ${name}`);
        return text;
      },
    };
    const cut = (sha: string) => ({ inputCut: { ref: ref(sha), keys: ['body'] } });
    const preview = { ...INPUT, body: 'the long…' };
    const cutOrigin = { input: preview };
    await endedOrigin(setup, cutOrigin);
    // The triaged task carries the cut as triage made it.
    const cutFork = async (id: string, sha: string) => {
      const result = await claim(setup.services, {
        ...triagedTask(fork(id, { input: preview })),
        ...cut(sha),
      });
      if (result.next !== 'run') throw new Error(`claimed as ${result.next}`);
      return result.claimed.input;
    };
    // The origin's task.accepted has no cut here; give it the first one, as a stored input's would have.
    const accepted = setup.bus.events.find((e) => e.taskId === 'orig' && e.kind === 'task.accepted');
    if (accepted?.kind !== 'task.accepted') throw new Error('no task.accepted');
    accepted.data.inputCut = cut('1').inputCut;
    expect(reusedSteps(await cutFork('cut-same-digest', '1'))).toEqual(['plan', 'approve']);
    expect(reusedSteps(await cutFork('cut-same-whole', '2'))).toEqual(['plan', 'approve']);
    expect(reusedSteps(await cutFork('cut-other-whole', '3'))).toEqual(['plan']);
    expect(reusedSteps(await cutFork('cut-gone', '4'))).toEqual(['plan']);
  });
});
