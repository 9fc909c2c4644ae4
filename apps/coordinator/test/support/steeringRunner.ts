import {
  type AgentStepReply,
  AgentStepRequest,
  ControlReceipt,
  subjects,
  type UsageTotals,
  WorkflowRecord,
} from '@troupe/protocol';
import { createLogger, type Delivery } from '@troupe/runtime';
import { MemoryBus, MemoryKv, SimulatedClock } from '@troupe/testkit';
import { afterEach, expect } from 'vitest';
import { PipelineConfig } from '../../src/config/pipelineSchema.ts';
import { type PipelineRunner, startPipelineRunner } from '../../src/workflow/pipelineRunner.ts';
import { MemoryTaskIntake } from '../memoryTaskIntake.ts';

export const usage: UsageTotals = {
  inputTokens: 2,
  outputTokens: 1,
  cachedTokens: 0,
  costUsd: 0,
  modelCalls: 1,
};
export const HOUR = 3_600_000;

export const pipeline = (flow: unknown[], extra: Record<string, unknown> = {}) =>
  PipelineConfig.parse({
    version: 1,
    name: 'unit',
    models: { scripted: { provider: 'scripted', script: './unit.script.yaml' } },
    defaults: { model: 'scripted', stepTimeout: 60 },
    agents: { planner: { instructions: 'Plan.' }, builder: { instructions: 'Build.' } },
    flow,
    ...extra,
  });

export const twoSteps = pipeline([
  { id: 'plan', kind: 'agent', agent: 'planner' },
  { id: 'build', kind: 'agent', agent: 'builder' },
]);

export type Step = Delivery<AgentStepRequest>;
type RunnerOptions = Parameters<typeof startPipelineRunner>[0];

/**
 * A pipeline runner on an in-memory bus, KV bucket and task intake, whose agents are played by the test: every
 * step sent waits in `waiting` until the test answers it (`ok`, `paused`, …).
 */
export async function setUp(
  config: PipelineConfig,
  extra: Pick<RunnerOptions, 'subPipelines' | 'people' | 'holdRequests'> = {},
) {
  const clock = new SimulatedClock();
  const bus = new MemoryBus({ clock });
  const store = new MemoryKv(WorkflowRecord);
  const intake = new MemoryTaskIntake();
  const sent: AgentStepRequest[] = [];
  const waiting: Step[] = [];
  for (const agent of Object.keys(config.agents)) {
    bus.subscribe(subjects.agent('unit', agent), AgentStepRequest, (delivery) => {
      sent.push(delivery.value);
      waiting.push(delivery);
    });
  }
  const { runner } = await startRunner({ bus, store, clock }, config, extra, intake);
  const control = (taskId: string, message: Record<string, unknown>) =>
    bus.request(subjects.control(taskId), message, ControlReceipt, { timeoutMs: 1_000 });
  /** Waits for the step of `stepId` to be sent (again), and takes it off the waiting list. */
  const next = async (stepId: string): Promise<Step> => {
    let found: Step | undefined;
    await expect
      .poll(() => {
        const at = waiting.findIndex((d) => d.value.stepId === stepId);
        if (at >= 0) found = waiting.splice(at, 1)[0];
        return found !== undefined;
      })
      .toBe(true);
    return found as Step;
  };
  const record = async (taskId: string) => (await store.get(taskId))?.value;
  return { clock, bus, store, intake, sent, waiting, runner, control, next, record };
}

/**
 * Starts a pipeline runner as `setUp` does, on the bus, KV bucket and clock of `on` (another coordinator taking
 * its tasks over), with a task intake of its own; it is stopped after the test with the others.
 */
export async function startRunner(
  on: Pick<RunnerOptions, 'bus' | 'store' | 'clock'>,
  config: PipelineConfig,
  extra: Pick<RunnerOptions, 'subPipelines' | 'people' | 'holdRequests'> = {},
  intake = new MemoryTaskIntake(),
): Promise<{ runner: PipelineRunner; intake: MemoryTaskIntake }> {
  const runner = await startPipelineRunner({
    bus: on.bus,
    intake,
    config,
    store: on.store,
    logger: createLogger({ level: 'silent' }),
    clock: on.clock,
    concurrency: 4,
    stepHeartbeatMs: 10 * HOUR,
    ...extra,
  });
  running.push(runner);
  return { runner, intake };
}

export const ok = (step: Step, output = `${step.value.agent} did it`, extra: Partial<AgentStepReply> = {}) =>
  step.respond({ ok: true, stepId: step.value.stepId, output, usage, turns: 1, ...extra } as AgentStepReply);
export const paused = (step: Step, extra: Partial<AgentStepReply> = {}) =>
  step.respond({
    ok: false,
    stepId: step.value.stepId,
    error: { code: 'paused', message: 'the task was paused' },
    usage,
    turns: 1,
    ...extra,
  } as AgentStepReply);

/** Runners a test started outside `setUp`, stopped after it with the others. */
export const running: PipelineRunner[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((runner) => runner.stop()));
});
