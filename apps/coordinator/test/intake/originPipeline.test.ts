import { emptyUsage, WorkflowRecord } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { PipelineConfig } from '../../src/config/pipelineSchema.ts';
import { claim } from '../../src/intake/claim.ts';
import { config, intakeServices, triagedTask, V1 } from './taskServices.ts';

/** Pipeline `unit` with files handed on, so a carried manifest would reach its step. */
const handOff = PipelineConfig.parse({ ...config, workspace: { handOff: true } });
const secret = { bytes: 6, sha256: 'e'.repeat(64) };

/**
 * An ended task `theirs` of pipeline `other`: its `plan` step completed with a secret output, and its `ship` step
 * started with a file handed on.
 */
async function otherPipelinesTask(setup: ReturnType<typeof intakeServices>) {
  const { services, store, bus } = setup;
  const now = new Date(0).toISOString();
  await store.create(
    'theirs',
    WorkflowRecord.parse({
      taskId: 'theirs',
      pipeline: 'other',
      version: V1,
      status: 'failed',
      state: 'ship',
      streamSequence: 1,
      goal: 'their goal',
      createdAt: now,
      updatedAt: now,
      round: 1,
      usage: emptyUsage(),
    }),
  );
  const scope = {
    pipeline: 'other',
    taskId: 'theirs',
    traceparent: `00-${'1'.repeat(32)}-${'2'.repeat(16)}-01`,
  };
  await bus.publishEvent(services.events.make('task.accepted', scope, { goal: 'their goal' }));
  const plan = { step: 'plan', agent: 'planner', round: 1, stepId: 'theirs.plan.1' };
  await bus.publishEvent(services.events.make('step.started', scope, plan));
  await bus.publishEvent(
    services.events.make('step.completed', scope, {
      ...plan,
      ok: true,
      output: "the other pipeline's secret plan",
      usage: emptyUsage(),
      turns: 1,
      durationMs: 1,
    }),
  );
  const ship = { step: 'ship', agent: 'shipper', round: 1, stepId: 'theirs.ship.1' };
  await bus.publishEvent(
    services.events.make('step.started', scope, { ...ship, workspace: { 'secret.txt': secret } }),
  );
  await bus.settled();
}

describe("a restart's or fork's origin", () => {
  it("must be a task of the pipeline it is published to: another pipeline's outputs and files are not taken", async () => {
    const setup = intakeServices({ config: handOff });
    await otherPipelinesTask(setup);
    // As any NATS client allowed to submit to `unit` may publish it, naming a task of `other`.
    const result = await claim(
      setup.services,
      triagedTask({
        id: 'mine',
        goal: 'their goal',
        origin: { taskId: 'theirs', kind: 'fork', step: 'ship', newest: true },
      }),
    );
    expect(result).toMatchObject({
      next: 'fail',
      message: expect.stringContaining('cannot fork task theirs: it is not a task of pipeline unit'),
    });
    if (result.next !== 'fail') return;
    expect(result.claimed.input.reuse).toBeUndefined();
    expect(result.claimed.input.workspace).toBeUndefined();
    // Nothing of the other pipeline's task is published under this one.
    const published = JSON.stringify(setup.bus.events.filter((e) => e.taskId === 'mine'));
    expect(published).not.toContain('secret');
  });
});
