import { access, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ModelProvider, ModelRequest, ModelResponse, ToolCall } from '@troupe/llm';
import { AgentStepReply, type AgentStepRequest, subjects } from '@troupe/protocol';
import { MemoryBus, MemoryKv, SimulatedClock } from '@troupe/testkit';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type AgentHost, startAgentHost } from '../../src/agent/agentHost.ts';
import type { LocalStepHooks } from '../../src/agent/localSteps.ts';
import type { CallerCheckpoint } from '../../src/durable/callerCheckpoint.ts';
import { StepJournal } from '../../src/durable/stepJournal.ts';
import { createLogger } from '../../src/logging/logger.ts';
import { fileTools, ToolRegistry } from '../../src/tools/index.ts';
import { recordingHeartbeats } from './hostFakes.ts';

/** A model that plays each step's replies in order, by step id, and keeps what it was asked. */
function stepModel(replies: Record<string, Partial<ModelResponse>[]>) {
  const asked: ModelRequest[] = [];
  const model: ModelProvider = {
    provider: 'steps',
    model: 'steps-1',
    complete: async (request) => {
      asked.push(request);
      const stepId = request.context.stepId ?? '';
      const reply = replies[stepId]?.shift();
      if (!reply) throw new Error(`no reply left for step ${stepId}`);
      return {
        content: '',
        toolCalls: [],
        usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0 },
        finishReason: 'stop',
        model: 'steps-1',
        ...reply,
      };
    },
  };
  return { model, asked };
}

const write = (path: string): ToolCall => ({
  id: 'call-1',
  name: 'write_file',
  arguments: JSON.stringify({ path, content: 'done' }),
});

const request = (stepId: string): AgentStepRequest => ({
  stepId,
  taskId: stepId.split('.')[0] ?? stepId,
  pipeline: 'local',
  agent: 'writer',
  step: 'write',
  round: 1,
  goal: 'write it',
  context: [],
  expect: 'text',
  priorModelCalls: 0,
  heartbeatMs: 5_000,
  timeoutMs: 60_000,
});

/** A workflow's checkpoint whose write the test holds, then lets land (or fail). */
function heldCheckpoint() {
  let land: (stored: boolean) => void = () => {};
  const stored = new Promise<boolean>((resolve) => (land = resolve));
  let asked = 0;
  const checkpoint: CallerCheckpoint = {
    stored: () => {
      asked += 1;
      return stored;
    },
  };
  return { checkpoint, land, asked: () => asked };
}

const storedAlready: CallerCheckpoint = { stored: async () => true };

describe("a local step's journal and its workflow's checkpoint", () => {
  let root: string;
  let bus: MemoryBus;
  let kv: MemoryKv<never>;
  let hosts: AgentHost[];

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'troupe-local-journal-'));
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });
  beforeEach(() => {
    bus = new MemoryBus({ clock: new SimulatedClock() });
    kv = new MemoryKv();
    hosts = [];
    return async () => {
      for (const host of hosts) await host.stop();
    };
  });

  const host = (model: ModelProvider) => {
    const registry = new ToolRegistry();
    for (const tool of fileTools) registry.register(tool);
    const started = startAgentHost({
      bus,
      pipeline: 'local',
      agents: [
        { name: 'writer', instructions: 'Write.', model, tools: ['write_file'], rules: [], maxTurns: 4 },
      ],
      registry,
      workspaceRoot: root,
      logger: createLogger({ level: 'silent' }),
      heartbeats: recordingHeartbeats().heartbeats,
      journal: new StepJournal(kv),
      version: 'v1',
      maxLocalSteps: 4,
    });
    hosts.push(started);
    return started;
  };
  const hooks = (checkpoint: CallerCheckpoint): LocalStepHooks => ({ onActivity: () => {}, checkpoint });
  const recorded = async (key: string) => (await kv.get(key))?.value as { kind: string } | undefined;
  const exists = (path: string) =>
    access(path).then(
      () => true,
      () => false,
    );

  it("journals a local step's replies but its final one, which its workflow's checkpoint records; over NATS, every reply", async () => {
    const { model } = stepModel({
      't1.write.1': [
        { toolCalls: [write('a.txt')], finishReason: 'tool_calls' },
        { content: 'Wrote a.txt.' },
      ],
      't2.write.1': [{ content: 'Done over NATS.' }],
      't3.write.1': [{ content: 'x'.repeat(4_001) }],
    });
    const here = host(model);

    const local = here.local.tryTake(request('t1.write.1'), hooks(storedAlready));
    expect(await local?.reply).toMatchObject({ ok: true, output: 'Wrote a.txt.' });
    expect(await recorded('t1.write.1.1.model')).toMatchObject({ kind: 'model.reply' });
    expect(await recorded('t1.write.1.1.0')).toMatchObject({ kind: 'tool.result' });
    expect(await recorded('t1.write.1.2.model')).toBeUndefined();

    const overNats: unknown[] = [];
    bus.requestReplies(subjects.agent('local', 'writer'), request('t2.write.1'), (message) => {
      if (message.ok) overNats.push(JSON.parse(new TextDecoder().decode(message.data)));
    });
    await expect
      .poll(() => overNats.find((m) => AgentStepReply.safeParse(m).success))
      .toMatchObject({ ok: true, output: 'Done over NATS.' });
    expect(await recorded('t2.write.1.1.model')).toMatchObject({ kind: 'model.reply' });

    // Longer than its `llm.response` event keeps: journaled all the same, for `troupe replay` to read whole.
    const long = here.local.tryTake(request('t3.write.1'), hooks(storedAlready));
    expect(await long?.reply).toMatchObject({ ok: true });
    expect(await recorded('t3.write.1.1.model')).toMatchObject({ kind: 'model.reply' });
  });

  it("writes nothing to a local step's journal, and runs no tool, until its workflow's checkpoint is stored", async () => {
    const { model, asked } = stepModel({
      't4.write.1': [
        { toolCalls: [write('b.txt')], finishReason: 'tool_calls' },
        { content: 'Wrote b.txt.' },
      ],
    });
    const here = host(model);
    const held = heldCheckpoint();

    const call = here.local.tryTake(request('t4.write.1'), hooks(held.checkpoint));
    // The model is asked meanwhile; its reply, the first write, waits for the checkpoint.
    await expect.poll(() => held.asked()).toBe(1);
    expect(asked).toHaveLength(1);
    await bus.settled();
    expect(kv.writes).toBe(0);
    expect(await exists(join(root, 'local', 't4', 'b.txt'))).toBe(false);

    held.land(true);
    expect(await call?.reply).toMatchObject({ ok: true, output: 'Wrote b.txt.' });
    expect(await recorded('t4.write.1.1.model')).toMatchObject({ kind: 'model.reply' });
    expect(await recorded('t4.write.1.1.0')).toMatchObject({ kind: 'tool.result' });
    expect(await exists(join(root, 'local', 't4', 'b.txt'))).toBe(true);
    // Asked once: later writes do not wait again.
    expect(held.asked()).toBe(1);
  });

  it('stops a local step whose checkpoint is not stored (its task taken over, say): nothing written, no tool run', async () => {
    const { model } = stepModel({
      't5.write.1': [
        { toolCalls: [write('c.txt')], finishReason: 'tool_calls' },
        { content: 'Wrote c.txt.' },
      ],
    });
    const here = host(model);
    const held = heldCheckpoint();

    const call = here.local.tryTake(request('t5.write.1'), hooks(held.checkpoint));
    await expect.poll(() => held.asked()).toBe(1);
    held.land(false);

    expect(await call?.reply).toMatchObject({ ok: false, error: { code: 'journal_unavailable' } });
    expect(kv.writes).toBe(0);
    expect(await exists(join(root, 'local', 't5', 'c.txt'))).toBe(false);
  });
});
