import { AgentStepRequest, subjects, type UsageTotals, WorkflowRecord } from '@troupe/protocol';
import { createLogger, type Delivery } from '@troupe/runtime';
import { MemoryBus, MemoryKv, SimulatedClock } from '@troupe/testkit';
import { afterEach, describe, expect, it } from 'vitest';
import { PipelineConfig } from '../src/config/pipelineSchema.ts';
import { type PipelineRunner, startPipelineRunner } from '../src/workflow/pipelineRunner.ts';
import { MemoryTaskIntake } from './memoryTaskIntake.ts';

const usage: UsageTotals = { inputTokens: 2, outputTokens: 1, cachedTokens: 0, costUsd: 0, modelCalls: 1 };

const config = PipelineConfig.parse({
  version: 1,
  name: 'unit',
  models: { scripted: { provider: 'scripted', script: './unit.script.yaml' } },
  defaults: { model: 'scripted', stepTimeout: 120 },
  agents: { planner: { instructions: 'Plan.' }, executor: { instructions: 'Do.' } },
  flow: [
    { id: 'plan', kind: 'agent', agent: 'planner' },
    { id: 'execute', kind: 'agent', agent: 'executor' },
  ],
});

/** A child of a persisted machine snapshot, as a checkpoint holds it. */
interface PersistedChild {
  src: unknown;
  snapshot: { status: string; value?: unknown; input?: unknown; context?: Record<string, unknown> };
}

const runners: PipelineRunner[] = [];
afterEach(async () => {
  await Promise.all(runners.splice(0).map((runner) => runner.stop()));
});

describe('a task checkpointed before the step call was the workflow’s child', () => {
  it('resumes the step in flight from the promise snapshot its checkpoint holds: sent again, same id, not fresh', async () => {
    const clock = new SimulatedClock();
    const bus = new MemoryBus({ clock });
    const store = new MemoryKv(WorkflowRecord);
    const steps: AgentStepRequest[] = [];
    let executorAnswers = false;
    let executorArrived = () => {};
    const arrived = new Promise<void>((resolve) => (executorArrived = resolve));
    for (const agent of ['planner', 'executor']) {
      bus.subscribe(
        subjects.agent('unit', agent),
        AgentStepRequest,
        (delivery: Delivery<AgentStepRequest>) => {
          steps.push(delivery.value);
          if (agent === 'executor' && !executorAnswers) return executorArrived();
          delivery.respond({
            ok: true,
            stepId: delivery.value.stepId,
            output: `${agent} did it`,
            usage,
            turns: 1,
          });
        },
      );
    }
    const start = (intake: MemoryTaskIntake) =>
      startPipelineRunner({
        bus,
        intake,
        config,
        store,
        logger: createLogger({ level: 'silent' }),
        clock,
        concurrency: 4,
      }).then((runner) => {
        runners.push(runner);
        return runner;
      });

    const first = new MemoryTaskIntake();
    const runner = await start(first);
    const task = first.deliver({ id: 'task-old', goal: 'resume me' });
    await arrived;
    await runner.stop();
    await task.handled;

    // Turn the checkpoint into one of before the upgrade: the step's child, a machine now, was a promise actor
    // whose persisted snapshot held only its input (the request and the step's timeout).
    const entry = await store.get('task-old');
    const record = entry?.value as WorkflowRecord;
    const snapshot = record.snapshot as { children: Record<string, PersistedChild> };
    const [id, child] = Object.entries(snapshot.children).find(([, c]) => c.src === 'runStep') ?? [];
    expect(child?.snapshot).toMatchObject({ status: 'active', value: { calling: 'sent' } });
    const request = child?.snapshot.context?.request as AgentStepRequest;
    snapshot.children[id as string] = {
      ...(child as PersistedChild),
      snapshot: { status: 'active', input: { request, timeoutMs: 120_000 } },
    };
    await store.put('task-old', record);

    executorAnswers = true;
    const second = new MemoryTaskIntake();
    await start(second);
    const redelivered = second.deliver(
      { id: 'task-old', goal: 'resume me' },
      { streamSequence: task.delivery.streamSequence, deliveryCount: 2 },
    );
    await redelivered.handled;
    expect(steps.map((s) => [s.stepId, s.fresh])).toEqual([
      ['task-old.plan.1', true],
      ['task-old.execute.1', true],
      ['task-old.execute.1', undefined],
    ]);
    expect(steps[2]?.timeoutMs).toBe(120_000);
    expect(redelivered.settlement()).toEqual({ kind: 'ack' });
    expect((await store.get('task-old'))?.value).toMatchObject({ status: 'completed' });
  });
});
