import {
  AgentStepRequest,
  ControlReceipt,
  subjects,
  type UsageTotals,
  WorkflowRecord,
} from '@troupe/protocol';
import { createLogger, type Delivery, type HumanGate, JournalEntry, StepJournal } from '@troupe/runtime';
import { MemoryBus, MemoryKv, SimulatedClock } from '@troupe/testkit';
import { afterEach, describe, expect, it } from 'vitest';
import { PipelineConfig } from '../../src/config/pipelineSchema.ts';
import {
  type PipelineRunner,
  type PipelineRunnerOptions,
  startPipelineRunner,
} from '../../src/workflow/pipelineRunner.ts';
import { MemoryTaskIntake } from '../memoryTaskIntake.ts';

const usage: UsageTotals = { inputTokens: 2, outputTokens: 1, cachedTokens: 0, costUsd: 0, modelCalls: 1 };

const configOf = (flow: unknown[]) =>
  PipelineConfig.parse({
    version: 1,
    name: 'unit',
    models: { scripted: { provider: 'scripted', script: './unit.script.yaml' } },
    defaults: { model: 'scripted' },
    agents: {
      planner: { instructions: 'Plan.' },
      executor: { instructions: 'Do.' },
      checker: { instructions: 'Check.' },
    },
    flow,
  });

const linear = configOf([
  { id: 'plan', kind: 'agent', agent: 'planner' },
  { id: 'execute', kind: 'agent', agent: 'executor' },
]);

/** What an agent's reply says of the people its step asked: `false`, `true`, or nothing (an older host). */
type Asked = boolean | 'unsaid' | 'never replies';
type StepHandler = (delivery: Delivery<AgentStepRequest>) => void;

/**
 * A pipeline runner on an in-memory bus, bucket and intake, whose agents reply as `asked` says for each step, and
 * whose `closeRequests` records the tasks whose requests were read to be closed.
 */
async function setUp(
  config: PipelineConfig,
  asked: (request: AgentStepRequest) => Asked = () => false,
  more: Partial<PipelineRunnerOptions> = {},
) {
  const clock = new SimulatedClock();
  const bus = new MemoryBus({ clock });
  const store = new MemoryKv(WorkflowRecord);
  const intake = new MemoryTaskIntake();
  const steps: AgentStepRequest[] = [];
  const read: string[] = [];
  const replies = { asked };
  const answer: StepHandler = (delivery) => {
    const request = delivery.value;
    steps.push(request);
    const said = replies.asked(request);
    if (said === 'never replies') return;
    const output =
      request.agent === 'planner' ? JSON.stringify({ parts: ['a', 'b'] }) : `${request.agent} did it`;
    delivery.respond({
      ok: true,
      stepId: request.stepId,
      output,
      usage,
      turns: 1,
      ...(said === 'unsaid' ? {} : { askedPeople: said }),
    });
  };
  for (const agent of ['planner', 'executor', 'checker'])
    bus.subscribe(subjects.agent('unit', agent), AgentStepRequest, answer);
  const start = (over: MemoryTaskIntake) =>
    startPipelineRunner({
      bus,
      intake: over,
      config,
      store,
      logger: createLogger({ level: 'silent' }),
      clock,
      concurrency: 4,
      closeRequests: async (taskId) => {
        read.push(taskId);
        return 0;
      },
      ...more,
    }).then((runner) => {
      running.push(runner);
      return runner;
    });
  const runner = await start(intake);
  return { clock, bus, store, intake, steps, read, runner, start, replies };
}

const running: PipelineRunner[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((runner) => runner.stop()));
});

describe("a task's end", () => {
  it('reads no requests of a task that ran whole in its first delivery and whose steps asked nobody', async () => {
    const { intake, read, bus, steps } = await setUp(linear);
    const task = intake.deliver({ id: 'quiet', goal: 'g' });
    await task.handled;
    expect(steps.map((s) => s.fresh)).toEqual([true, true]);
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
    expect(task.settlement()).toEqual({ kind: 'ack' });
    expect(read).toEqual([]);
  });

  it('reads them when a step says it asked a person', async () => {
    const { intake, read } = await setUp(linear, (r) => r.agent === 'planner');
    const task = intake.deliver({ id: 'asked', goal: 'g' });
    await task.handled;
    expect(task.settlement()).toEqual({ kind: 'ack' });
    expect(read).toEqual(['asked']);
  });

  it('reads them when a reply does not say (an older host)', async () => {
    const { intake, read } = await setUp(linear, (r) => (r.agent === 'executor' ? 'unsaid' : false));
    await intake.deliver({ id: 'unsaid', goal: 'g' }).handled;
    expect(read).toEqual(['unsaid']);
  });

  it('reads them for a task that ends on a redelivery, though no step there asked', async () => {
    const first = await setUp(linear, (r) => (r.agent === 'executor' ? 'never replies' : false));
    const task = first.intake.deliver({ id: 'resumed', goal: 'g' });
    await expect.poll(() => first.steps.length).toBe(2);
    await first.runner.stop();
    await task.handled;
    expect(task.settlement()).toMatchObject({ kind: 'nak' });
    // Another coordinator gets the message again; the step sent again says it asked nobody.
    first.replies.asked = () => false;
    const again = new MemoryTaskIntake();
    await first.start(again);
    const redelivered = again.deliver(
      { id: 'resumed', goal: 'g' },
      { streamSequence: task.delivery.streamSequence, deliveryCount: 2 },
    );
    await redelivered.handled;
    expect(first.bus.eventsOf('task.completed')).toHaveLength(1);
    expect(redelivered.settlement()).toEqual({ kind: 'ack' });
    expect(first.read).toEqual(['resumed']);
  });

  it('reads them for a task cancelled while a step was at work', async () => {
    const { intake, read, steps, runner, bus } = await setUp(linear, (r) =>
      r.agent === 'executor' ? 'never replies' : false,
    );
    const task = intake.deliver({ id: 'cancelled', goal: 'g' });
    await expect.poll(() => steps.length).toBe(2);
    expect(runner.running()).toContain('cancelled');
    const receipt = await bus.request(subjects.control('cancelled'), { action: 'cancel' }, ControlReceipt, {
      timeoutMs: 1_000,
    });
    expect(receipt).toMatchObject({ ok: true, outcome: 'cancelled' });
    await task.handled;
    expect(bus.eventsOf('task.cancelled')).toHaveLength(1);
    expect(read).toEqual(['cancelled']);
  });

  it('reads them when a parallel step moves on past a branch whose step was still at work', async () => {
    const config = configOf([
      {
        id: 'both',
        kind: 'parallel',
        join: 'first',
        branches: {
          fast: [{ id: 'quick', kind: 'agent', agent: 'executor' }],
          slow: [{ id: 'careful', kind: 'agent', agent: 'checker' }],
        },
      },
    ]);
    const { intake, read, bus } = await setUp(config, (r) =>
      r.agent === 'checker' ? 'never replies' : false,
    );
    await intake.deliver({ id: 'branches', goal: 'g' }).handled;
    expect(bus.eventsOf('task.completed')).toHaveLength(1);
    expect(read).toEqual(['branches']);
  });

  it('reads them when a `human` step was left with its question pending (a cancel): its gate leaves it for the end to close', async () => {
    const clock = new SimulatedClock();
    const asked: string[] = [];
    // A gate whose question nobody answers; as the runner's, it leaves the question pending when the wait is cut.
    const gate: HumanGate = {
      approve: async () => ({ decision: 'deny', reason: 'not asked' }),
      ask: async (_question, scope, signal, options) => {
        await options?.onAsked?.(`q-${scope.stepId}`);
        asked.push(scope.stepId);
        return new Promise<string>((_resolve, reject) =>
          signal.addEventListener('abort', () => reject(signal.reason), { once: true }),
        );
      },
    };
    const journal = new StepJournal(new MemoryKv(JournalEntry));
    const config = configOf([{ id: 'confirm', kind: 'human', prompt: 'Ship it?', timeout: 600 }]);
    const { intake, read, bus } = await setUp(config, () => false, { people: { gate, journal, clock } });
    const task = intake.deliver({ id: 'asked-by-step', goal: 'g' });
    await expect.poll(() => asked).toEqual(['asked-by-step.confirm.1']);
    const receipt = await bus.request(
      subjects.control('asked-by-step'),
      { action: 'cancel' },
      ControlReceipt,
      {
        timeoutMs: 1_000,
      },
    );
    expect(receipt).toMatchObject({ ok: true, outcome: 'cancelled' });
    await task.handled;
    expect(bus.eventsOf('task.cancelled')).toHaveLength(1);
    expect(read).toEqual(['asked-by-step']);
  });

  describe('of a task with a foreach step', () => {
    const config = configOf([
      { id: 'plan', kind: 'agent', agent: 'planner' },
      {
        id: 'each',
        kind: 'foreach',
        items: 'steps.plan.output.parts',
        maxItems: 5,
        concurrency: 2,
        do: [{ id: 'work', kind: 'agent', agent: 'executor' }],
      },
    ]);

    it('reads no requests when no item asked anybody', async () => {
      const { intake, read, steps, bus } = await setUp(config);
      await intake.deliver({ id: 'items-quiet', goal: 'g' }).handled;
      expect(steps.map((s) => s.stepId)).toHaveLength(3);
      expect(bus.eventsOf('task.completed')).toHaveLength(1);
      expect(read).toEqual([]);
    });

    it("reads them when one item's step asked a person", async () => {
      const { intake, read, bus } = await setUp(config, (r) => r.stepId.endsWith('.i1'));
      await intake.deliver({ id: 'items-asked', goal: 'g' }).handled;
      expect(bus.eventsOf('task.completed')).toHaveLength(1);
      expect(read).toEqual(['items-asked']);
    });
  });
});
