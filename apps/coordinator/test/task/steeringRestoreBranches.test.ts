import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ModelProvider, ModelRequest, ModelResponse, ToolCall } from '@troupe/llm';
import { ControlReceipt, subjects, WorkflowRecord } from '@troupe/protocol';
import {
  type AgentHost,
  createLogger,
  JournalEntry,
  StepJournal,
  startAgentHost,
  ToolRegistry,
} from '@troupe/runtime';
import { MemoryBus, MemoryKv, SimulatedClock } from '@troupe/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { versionHash } from '../../src/config/pipelineVersion.ts';
import { startPipelineRunner } from '../../src/workflow/pipelineRunner.ts';
import { MemoryTaskIntake } from '../memoryTaskIntake.ts';
import { HOUR, pipeline, running } from '../support/steeringRunner.ts';

/** A model that answers only when the test says so, each call kept with its request. */
function heldModel() {
  const asked: { request: ModelRequest; answer: (content: string, toolCalls?: ToolCall[]) => void }[] = [];
  const model: ModelProvider = {
    provider: 'held',
    model: 'held-1',
    complete: (request) =>
      new Promise<ModelResponse>((resolve) => {
        asked.push({
          request,
          answer: (content, toolCalls = []) =>
            resolve({
              content,
              toolCalls,
              usage: { inputTokens: 10, outputTokens: 2, cachedTokens: 0 },
              finishReason: toolCalls.length > 0 ? 'tool_calls' : 'stop',
              model: 'held-1',
            }),
        });
      }),
  };
  return { model, asked };
}

const noteCall: ToolCall = { id: 'call-1', name: 'note', arguments: '{"text":"a note"}' };
/** How many messages of a model request say `text`. */
const saying = (request: ModelRequest | undefined, text: string) =>
  request?.messages.filter((m) => m.content.includes(text)).length ?? 0;

const config = pipeline([
  {
    id: 'both',
    kind: 'parallel',
    branches: {
      left: [
        { id: 'plan', kind: 'agent', agent: 'planner' },
        { id: 'replan', kind: 'agent', agent: 'planner' },
      ],
      right: [{ id: 'build', kind: 'agent', agent: 'builder' }],
    },
  },
]);

let root: string;
const hosts: AgentHost[] = [];
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'troupe-restore-branches-'));
});
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((host) => host.stop()));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe('a restored task with parallel branches, its agent host running on', () => {
  it("gives a branch's next step no message the branch read, though the restored task publishes it again", async () => {
    const clock = new SimulatedClock();
    const bus = new MemoryBus({ clock });
    const store = new MemoryKv(WorkflowRecord);
    const logger = createLogger({ level: 'silent' });
    const { model, asked } = heldModel();
    const registry = new ToolRegistry();
    registry.register({
      name: 'note',
      description: 'Notes something.',
      input: z.object({ text: z.string() }),
      run: async () => 'noted',
    });
    hosts.push(
      startAgentHost({
        bus,
        pipeline: 'unit',
        agents: ['planner', 'builder'].map((name) => ({
          name,
          instructions: name === 'planner' ? 'Plan.' : 'Build.',
          model,
          tools: ['note'],
          rules: [],
          maxTurns: 5,
        })),
        registry,
        workspaceRoot: root,
        logger,
        clock,
        journal: new StepJournal(new MemoryKv(JournalEntry)),
        // The version the runner records on its tasks: that of `config` alone.
        version: versionHash(config, {}),
      }),
    );
    const start = async (intake: MemoryTaskIntake) => {
      const runner = await startPipelineRunner({
        bus,
        intake,
        config,
        store,
        logger,
        clock,
        concurrency: 4,
        stepHeartbeatMs: 10 * HOUR,
      });
      running.push(runner);
      return runner;
    };
    /** The steps whose agent read a told message into its conversation (`agent.told`), in order. */
    const readBy = () => bus.eventsOf('agent.told').map((event) => event.data.stepId);
    const callOf = (instructions: string, nth: number) =>
      asked.filter(({ request }) => saying(request, instructions) > 0)[nth];

    const intake = new MemoryTaskIntake();
    const first = await start(intake);
    const payload = { id: 'task-b', goal: 'both' };
    const task = intake.deliver(payload);
    await expect.poll(() => asked.length).toBe(2);
    await bus.request(subjects.control('task-b'), { action: 'tell', text: 'use v2' }, ControlReceipt, {
      timeoutMs: 1_000,
    });
    await bus.settled();
    // Time goes on (a step sent in the same millisecond as a tell would be given it from the host's memory).
    clock.advance(1_000);
    // The left branch's plan reads it before its second model call and ends; the right one's build owes it.
    callOf('Plan.', 0)?.answer('', [noteCall]);
    await expect.poll(() => saying(callOf('Plan.', 1)?.request, 'use v2')).toBe(1);
    callOf('Plan.', 1)?.answer('planned');
    // replan, sent after plan read it, is at work (its first model call held).
    await expect.poll(() => callOf('Plan.', 2) !== undefined).toBe(true);
    expect(readBy()).toEqual(['task-b.plan.1']);
    await expect
      .poll(async () => (await store.get('task-b'))?.value.toldOwed)
      .toEqual([{ messageId: 'm-1', steps: ['task-b.build.1'] }]);

    // Its coordinator stops; another takes the task over from its record while the host's steps run on.
    await first.stop();
    await task.handled;
    const again = new MemoryTaskIntake();
    await start(again);
    const restored = again.deliver(payload, {
      streamSequence: task.delivery.streamSequence,
      deliveryCount: 2,
    });
    await expect.poll(() => bus.eventsOf('task.told').length).toBe(2);
    await bus.settled();

    // replan goes on: its agent reads not the message its branch read, before its next model call or ever.
    callOf('Plan.', 2)?.answer('', [noteCall]);
    await expect.poll(() => callOf('Plan.', 3) !== undefined).toBe(true);
    expect(readBy()).toEqual(['task-b.plan.1']);
    callOf('Plan.', 3)?.answer('replanned');
    // build, which owes it, reads it once.
    callOf('Build.', 0)?.answer('', [noteCall]);
    await expect.poll(() => callOf('Build.', 1) !== undefined).toBe(true);
    expect(saying(callOf('Build.', 1)?.request, 'use v2')).toBe(1);
    callOf('Build.', 1)?.answer('built');
    await restored.handled;
    expect((await store.get('task-b'))?.value.status).toBe('completed');
    expect(readBy()).toEqual(['task-b.plan.1', 'task-b.build.1']);
  });
});
