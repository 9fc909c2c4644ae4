import { AgentStepRequest, subjects, WorkflowRecord } from '@troupe/protocol';
import { MemoryBus, MemoryKv, SimulatedClock } from '@troupe/testkit';
import { describe, expect, it } from 'vitest';
import { ok, type Step, startRunner, twoSteps } from '../support/steeringRunner.ts';

describe("a task's events and its record", () => {
  it('has the bus send the task’s open events before each write of its record, the final one too', async () => {
    const clock = new SimulatedClock();
    const bus = new MemoryBus({ clock });
    const store = new MemoryKv(WorkflowRecord);
    // In send order: what the task publishes, each time the bus is told to send its open batch, each record write.
    const order: string[] = [];
    const publishEvent = bus.publishEvent.bind(bus);
    bus.publishEvent = (event) => {
      order.push(`event ${event.kind}`);
      return publishEvent(event);
    };
    Object.assign(bus, {
      sendOpenEvents: (pipeline: string, taskId: string) => order.push(`send ${pipeline}.${taskId}`),
    });
    const update = store.update.bind(store);
    store.update = (key, value, revision) => {
      order.push(`record ${value.status}`);
      return update(key, value, revision);
    };
    const waiting: Step[] = [];
    for (const agent of Object.keys(twoSteps.agents))
      bus.subscribe(subjects.agent('unit', agent), AgentStepRequest, (step) => void waiting.push(step));
    const { intake } = await startRunner({ bus, store, clock }, twoSteps);
    intake.deliver({ id: 'task-1', goal: 'build it' });
    for (const _step of ['plan', 'build']) {
      await expect.poll(() => waiting.length).toBe(1);
      ok(waiting.shift() as Step);
    }
    await expect.poll(() => order.includes('event task.completed')).toBe(true);
    await bus.settled();
    const records = order.flatMap((line, at) => (line.startsWith('record') ? [at] : []));
    // The second step's checkpoint (the first one's the claim's record holds) and the final one.
    expect(records.map((at) => order[at])).toEqual(['record running', 'record completed']);
    // Each write follows a send of the task's events: the first step's, and the second's entry, before the first.
    for (const at of records) expect(order[at - 1], `before ${order[at]}`).toBe('send unit.task-1');
  });
});
