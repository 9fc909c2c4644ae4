import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInbox } from '@nats-io/transport-node';
import type { ModelProvider, ModelRequest, ModelResponse } from '@troupe/llm';
import { AgentStepReply, type AgentStepRequest, StepHeartbeat, subjects } from '@troupe/protocol';
import { SimulatedClock, startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AgentHost, startAgentHost } from '../../src/agent/agentHost.ts';
import { ToolRegistry } from '../../src/tools/toolRegistry.ts';
import { NatsBus } from '../../src/transport/natsBus.ts';
import { captureLogger } from '../transport/natsFixture.ts';

/** A model that answers only when the test says so. */
function heldModel() {
  const asked: ModelRequest[] = [];
  const answers: ((response: ModelResponse) => void)[] = [];
  const model: ModelProvider = {
    provider: 'held',
    model: 'held-1',
    complete: (request) =>
      new Promise<ModelResponse>((resolve) => {
        asked.push(request);
        answers.push(resolve);
      }),
  };
  const answer = (content: string) =>
    answers.shift()?.({
      content,
      toolCalls: [],
      usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0 },
      finishReason: 'stop',
      model: 'held-1',
    });
  return { model, asked, answer };
}

describe('agent host on a simulated clock', () => {
  let nats: TestNats;
  let bus: NatsBus;
  let root: string;
  let clock: SimulatedClock;
  let host: AgentHost;
  const held = heldModel();

  beforeAll(async () => {
    nats = await startTestNats({ jetstream: false });
    bus = await NatsBus.connect({ servers: nats.url, name: 'host-test', logger: captureLogger().logger });
    root = await mkdtemp(join(tmpdir(), 'troupe-host-'));
    clock = new SimulatedClock();
    host = startAgentHost({
      bus,
      pipeline: 'timed',
      agents: [
        { name: 'thinker', instructions: 'Think.', model: held.model, tools: [], rules: [], maxTurns: 2 },
      ],
      registry: new ToolRegistry(),
      workspaceRoot: root,
      logger: captureLogger().logger,
      clock,
    });
    await bus.flush();
  });
  afterAll(async () => {
    await host?.stop();
    await bus?.close();
    await nats?.stop();
    await rm(root, { recursive: true, force: true });
  });

  /** Sends a step to the host; what comes back to its inbox (heartbeats, then the reply) is collected. */
  async function sendStep(stepId: string, extra: Partial<AgentStepRequest>) {
    const inbox = createInbox(subjects.inboxPrefix);
    const received: unknown[] = [];
    bus.connection.subscribe(inbox, { callback: (_e, msg) => void received.push(msg.json()) });
    await bus.connection.flush();
    const request: AgentStepRequest = {
      stepId,
      taskId: stepId.split('.')[0] ?? stepId,
      pipeline: 'timed',
      agent: 'thinker',
      step: 'think',
      round: 1,
      goal: 'think it over',
      context: [],
      expect: 'text',
      priorModelCalls: 0,
      ...extra,
    };
    bus.connection.publish(subjects.agent('timed', 'thinker'), JSON.stringify(request), { reply: inbox });
    const heartbeats = () => received.filter((m) => StepHeartbeat.safeParse(m).success) as StepHeartbeat[];
    const reply = () => received.map((m) => AgentStepReply.safeParse(m)).find((r) => r.success)?.data;
    return { heartbeats, reply };
  }

  it('beats on the clock, reports a model wait once the call has lasted 100 ms, and its end at once', async () => {
    const step = await sendStep('t1.think.1', { heartbeatMs: 5_000, timeoutMs: 60_000 });
    // The first heartbeat goes as the step is taken; the model is asked; nothing more until the clock moves.
    await expect.poll(() => held.asked.length).toBe(1);
    await expect.poll(() => step.heartbeats().length).toBe(1);
    expect(step.heartbeats()[0]).toEqual({ stepId: 't1.think.1', heartbeat: true });

    clock.advance(99);
    await bus.connection.flush();
    expect(step.heartbeats()).toHaveLength(1);
    clock.advance(1);
    await expect.poll(() => step.heartbeats().length).toBe(2);
    expect(step.heartbeats()[1]).toEqual({ stepId: 't1.think.1', heartbeat: true, waitingOnModel: true });

    // The regular heartbeat, 5 s in, still says the step waits on its model.
    clock.advance(4_900);
    await expect.poll(() => step.heartbeats().length).toBe(3);
    expect(step.heartbeats()[2]).toMatchObject({ waitingOnModel: true });

    // The reply ends the wait: a heartbeat says so at once, then the reply comes.
    held.answer('Thought it over.');
    await expect.poll(() => step.reply()).toMatchObject({ ok: true, output: 'Thought it over.' });
    expect(step.heartbeats()[3]).toEqual({ stepId: 't1.think.1', heartbeat: true });
    // The step has ended: the clock moving on sends nothing more, and no timer of it is left.
    clock.advance(60_000);
    await bus.connection.flush();
    expect(step.heartbeats()).toHaveLength(4);
    expect(clock.pending()).toEqual([]);
  });

  it('stops a step at its timeout on the clock, and says so', async () => {
    const step = await sendStep('t2.think.1', { timeoutMs: 30_000 });
    await expect.poll(() => held.asked.length).toBe(2);
    clock.advance(29_999);
    await bus.connection.flush();
    expect(step.reply()).toBeUndefined();
    clock.advance(1);
    await expect.poll(() => step.reply()).toMatchObject({ ok: false, error: { code: 'step_timeout' } });
    held.answer('too late');
  });
});
