import {
  AgentStepRequest,
  subjects,
  type TroupeEvent,
  type UsageTotals,
  WorkflowRecord,
} from '@troupe/protocol';
import { createLogger } from '@troupe/runtime';
import { MemoryBus, MemoryKv, SimulatedClock } from '@troupe/testkit';
import { afterEach, describe, expect, it } from 'vitest';
import { PipelineConfig } from '../../src/config/pipelineSchema.ts';
import { versionHash } from '../../src/config/pipelineVersion.ts';
import { type PipelineRunner, startPipelineRunner } from '../../src/workflow/pipelineRunner.ts';
import { MemoryTaskIntake } from '../memoryTaskIntake.ts';

const usage: UsageTotals = { inputTokens: 1, outputTokens: 1, cachedTokens: 0, costUsd: 0, modelCalls: 1 };
const base = {
  version: 1,
  name: 'unit',
  models: { scripted: { provider: 'scripted', script: './unit.script.yaml' } },
  defaults: { model: 'scripted' },
  agents: { writer: { instructions: 'Write.' }, checker: { instructions: 'Check.' } },
};
const mine = PipelineConfig.parse({ ...base, flow: [{ id: 'write', kind: 'agent', agent: 'writer' }] });
const newer = PipelineConfig.parse({
  ...base,
  flow: [
    { id: 'write', kind: 'agent', agent: 'writer' },
    { id: 'check', kind: 'agent', agent: 'checker' },
  ],
});
const hashOf = (config: PipelineConfig) => versionHash(config, {});

const running: PipelineRunner[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((runner) => runner.stop()));
});

describe("the runner's ended hook (online scoring's cue)", () => {
  it('names the version the task ran on: the newest stored one it started on, not the one this runner loaded', async () => {
    const clock = new SimulatedClock();
    const bus = new MemoryBus({ clock });
    for (const agent of ['writer', 'checker']) {
      bus.subscribe(subjects.agent('unit', agent), AgentStepRequest, (delivery) =>
        delivery.respond({
          ok: true,
          stepId: delivery.value.stepId,
          output: `${agent} did it`,
          usage,
          turns: 1,
        }),
      );
    }
    const ended: { final: TroupeEvent; version: string | undefined }[] = [];
    let newest = hashOf(newer);
    const configs = new Map([mine, newer].map((config) => [hashOf(config), config]));
    const intake = new MemoryTaskIntake();
    running.push(
      await startPipelineRunner({
        bus,
        clock,
        store: new MemoryKv(WorkflowRecord),
        intake,
        config: mine,
        version: hashOf(mine),
        loadVersion: async (hash) => configs.get(hash),
        newest: async () => newest,
        logger: createLogger({ level: 'silent' }),
        concurrency: 2,
        ended: (final, version) => ended.push({ final, version }),
      }),
    );
    await intake.deliver({ id: 'task-new', goal: 'write it' }).handled;
    newest = hashOf(mine);
    await intake.deliver({ id: 'task-mine', goal: 'write it' }).handled;
    expect(ended.map((e) => [e.final.taskId, e.final.kind, e.version])).toEqual([
      ['task-new', 'task.completed', hashOf(newer)],
      ['task-mine', 'task.completed', hashOf(mine)],
    ]);
  });
});
