import { AgentStepRequest, ControlReceipt, subjects, WorkflowRecord } from '@troupe/protocol';
import { createLogger } from '@troupe/runtime';
import { MemoryBus, MemoryKv, SimulatedClock } from '@troupe/testkit';
import { afterEach, describe, expect, it } from 'vitest';
import { PipelineConfig } from '../../src/config/pipelineSchema.ts';
import { type PipelineRunner, startPipelineRunner } from '../../src/workflow/pipelineRunner.ts';
import { MemoryTaskIntake } from '../memoryTaskIntake.ts';

const config = PipelineConfig.parse({
  version: 1,
  name: 'unit',
  models: { scripted: { provider: 'scripted', script: './unit.script.yaml' } },
  defaults: { model: 'scripted', stepTimeout: 60 },
  agents: { planner: { instructions: 'Plan.' } },
  flow: [{ id: 'plan', kind: 'agent', agent: 'planner' }],
});

const runners: PipelineRunner[] = [];
afterEach(async () => {
  await Promise.all(runners.splice(0).map((runner) => runner.stop()));
});

describe('a restored task held or told', () => {
  it('publishes its pause and its unread messages again, with the ids they had, for a run killed before it published them', async () => {
    const clock = new SimulatedClock();
    const bus = new MemoryBus({ clock });
    const store = new MemoryKv(WorkflowRecord);
    // The agent never answers: the step stays in flight.
    bus.subscribe(subjects.agent('unit', 'planner'), AgentStepRequest, () => {});
    const start = async (intake: MemoryTaskIntake) => {
      const runner = await startPipelineRunner({
        bus,
        intake,
        config,
        store,
        logger: createLogger({ level: 'silent' }),
        clock,
        concurrency: 4,
      });
      runners.push(runner);
      return runner;
    };
    const control = (message: Record<string, unknown>) =>
      bus.request(subjects.control('task-1'), message, ControlReceipt, { timeoutMs: 1_000 });

    const firstIntake = new MemoryTaskIntake();
    const first = await start(firstIntake);
    const task = firstIntake.deliver({ id: 'task-1', goal: 'plan it' });
    await expect.poll(async () => (await store.get('task-1'))?.value.state).toBe('plan');
    await control({ action: 'tell', text: 'use the v2 API', by: 'ann' });
    await control({ action: 'pause', by: 'ann', reason: 'wrong way' });
    const paused = bus.eventsOf('task.paused');
    const told = bus.eventsOf('task.told');
    expect([paused.length, told.length]).toEqual([1, 1]);

    // Its coordinator stops; another takes the task from its record.
    await first.stop();
    await task.handled;
    const again = new MemoryTaskIntake();
    await start(again);
    again.deliver(
      { id: 'task-1', goal: 'plan it' },
      { streamSequence: task.delivery.streamSequence, deliveryCount: 2 },
    );
    await expect.poll(() => bus.eventsOf('task.told').length).toBe(2);
    await expect.poll(() => bus.eventsOf('task.paused').length).toBe(2);
    const [, toldAgain] = bus.eventsOf('task.told');
    const [, pausedAgain] = bus.eventsOf('task.paused');
    expect(toldAgain?.id).toBe(told[0]?.id);
    // The copy is marked, so hosts give it to no step (the step sent again carries it in `told`); the first is not.
    expect(told[0]?.data).toEqual({ messageId: told[0]?.data.messageId, text: 'use the v2 API', by: 'ann' });
    expect(toldAgain?.data).toEqual({ ...told[0]?.data, again: true });
    expect(pausedAgain?.id).toBe(paused[0]?.id);
    expect(pausedAgain?.data).toMatchObject({ by: 'ann', reason: 'wrong way', since: paused[0]?.data.since });
  });
});
