import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ModelProvider, ModelRequest, ModelResponse } from '@troupe/llm';
import { AgentStepReply, type AgentStepRequest, emptyUsage, StepHeartbeat, subjects } from '@troupe/protocol';
import { MemoryBus, SimulatedClock } from '@troupe/testkit';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type AgentHost, startAgentHost } from '../../src/agent/agentHost.ts';
import { EventFactory } from '../../src/events/eventFactory.ts';
import { createLogger } from '../../src/logging/logger.ts';
import { ToolRegistry } from '../../src/tools/toolRegistry.ts';

/** A model that answers only when the test says so; it sees each call's abort signal. */
function heldModel() {
  const asked: ModelRequest[] = [];
  const answers: ((response: ModelResponse) => void)[] = [];
  const model: ModelProvider = {
    provider: 'held',
    model: 'held-1',
    complete: (request) =>
      new Promise<ModelResponse>((resolve, reject) => {
        asked.push(request);
        answers.push(resolve);
        request.signal?.addEventListener('abort', () => reject(request.signal?.reason), { once: true });
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

const silent = createLogger({ level: 'silent' });

describe('agent host on an in-memory bus and a simulated clock', () => {
  let root: string;
  let clock: SimulatedClock;
  let bus: MemoryBus;
  let host: AgentHost;
  let held: ReturnType<typeof heldModel>;

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'troupe-host-'));
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });
  beforeEach(() => {
    clock = new SimulatedClock();
    bus = new MemoryBus({ clock });
    held = heldModel();
    host = startAgentHost({
      bus,
      pipeline: 'timed',
      agents: [
        { name: 'thinker', instructions: 'Think.', model: held.model, tools: [], rules: [], maxTurns: 2 },
      ],
      registry: new ToolRegistry(),
      workspaceRoot: root,
      logger: silent,
      clock,
    });
    return () => host.stop();
  });

  /** Sends a step to the host; what comes back (heartbeats, then the reply) is collected until `stop()`. */
  function sendStep(stepId: string, extra: Partial<AgentStepRequest> = {}) {
    const received: unknown[] = [];
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
    const stop = bus.requestReplies(subjects.agent('timed', request.agent), request, (message) => {
      if (message.ok) received.push(JSON.parse(new TextDecoder().decode(message.data)));
      else received.push({ failed: message.error.code });
    });
    const heartbeats = () => received.filter((m) => StepHeartbeat.safeParse(m).success) as StepHeartbeat[];
    const reply = () => received.map((m) => AgentStepReply.safeParse(m)).find((r) => r.success)?.data;
    return { heartbeats, reply, received, stop };
  }

  /** Moves the clock in steps of `stepMs`, letting what each step sets off settle. */
  async function pass(ms: number, stepMs = 1_000) {
    for (let passed = 0; passed < ms; passed += stepMs) {
      await bus.settled();
      clock.advance(Math.min(stepMs, ms - passed));
    }
    await bus.settled();
  }

  it('beats on the clock, reports a model wait once the call has lasted 100 ms, and its end at once', async () => {
    const step = sendStep('t1.think.1', { heartbeatMs: 5_000, timeoutMs: 60_000 });
    // The first heartbeat goes as the step is taken; the model is asked; nothing more until the clock moves.
    await expect.poll(() => held.asked.length).toBe(1);
    await expect.poll(() => step.heartbeats().length).toBe(1);
    expect(step.heartbeats()[0]).toEqual({ stepId: 't1.think.1', heartbeat: true });

    clock.advance(99);
    await bus.settled();
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
    await bus.settled();
    expect(step.heartbeats()).toHaveLength(4);
    expect(clock.pending()).toEqual([]);
  });

  it('stops a step at its timeout on the clock, and says so', async () => {
    const step = sendStep('t2.think.1', { timeoutMs: 30_000 });
    await expect.poll(() => held.asked.length).toBe(1);
    clock.advance(29_999);
    await bus.settled();
    expect(step.reply()).toBeUndefined();
    clock.advance(1);
    await expect.poll(() => step.reply()).toMatchObject({ ok: false, error: { code: 'step_timeout' } });
  });

  it('answers a step sent again while it runs from the same run: the model is asked once, both hear the reply', async () => {
    const first = sendStep('t3.think.1', { heartbeatMs: 5_000 });
    await expect.poll(() => held.asked.length).toBe(1);
    const again = sendStep('t3.think.1', { heartbeatMs: 5_000 });
    // It hears the run's heartbeats from the next one on.
    await pass(5_000);
    expect(again.heartbeats().length).toBeGreaterThan(0);
    held.answer('Once.');
    await expect.poll(() => again.reply()).toMatchObject({ ok: true, output: 'Once.' });
    expect(first.reply()).toMatchObject({ ok: true, output: 'Once.' });
    expect(held.asked).toHaveLength(1);
  });

  it('answers a step sent again after it ended with the reply it gave, without running it again', async () => {
    const first = sendStep('t4.think.1');
    await expect.poll(() => held.asked.length).toBe(1);
    held.answer('Done before.');
    await expect.poll(() => first.reply()).toMatchObject({ ok: true });
    const again = sendStep('t4.think.1');
    await expect.poll(() => again.reply()).toMatchObject({ ok: true, output: 'Done before.' });
    expect(held.asked).toHaveLength(1);
  });

  it('refuses a step for another agent than the one its subject names', async () => {
    const step = sendStep('t5.think.1', { agent: 'thinker', pipeline: 'other' });
    await expect.poll(() => step.reply()).toMatchObject({ ok: false, error: { code: 'misrouted' } });
    expect(held.asked).toHaveLength(0);
  });

  it('answers a request that is not a step with invalid_message, and runs nothing', async () => {
    const received: string[] = [];
    bus.requestReplies(subjects.agent('timed', 'thinker'), { stepId: 'x' }, (message) => {
      if (message.ok) received.push(new TextDecoder().decode(message.data));
    });
    await expect.poll(() => received.length).toBe(1);
    expect(JSON.parse(received[0] as string)).toMatchObject({
      ok: false,
      error: { code: 'invalid_message' },
    });
    expect(host.inFlight).toBe(0);
  });

  it('stops a step when its task’s final event is published, wherever its workflow runs', async () => {
    const step = sendStep('t6.think.1');
    await expect.poll(() => held.asked.length).toBe(1);
    const scope = {
      pipeline: 'timed',
      taskId: 't6',
      traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
    };
    await bus.publishEvent(new EventFactory(clock).make('task.cancelled', scope, { usage: emptyUsage() }));
    await expect
      .poll(() => step.reply())
      .toMatchObject({
        ok: false,
        error: {
          code: 'aborted',
          message: 'step t6.think.1 was aborted after 1 model call(s): its task has ended',
        },
      });
    expect(held.asked[0]?.signal?.aborted).toBe(true);
    expect(host.inFlight).toBe(0);
  });

  it('stops a step nobody waits for any more after ten heartbeats, leaving it to the next run', async () => {
    const step = sendStep('t7.think.1', { heartbeatMs: 1_000 });
    await expect.poll(() => held.asked.length).toBe(1);
    step.stop();
    await pass(8_000);
    expect(host.inFlight).toBe(1);
    await pass(4_000);
    expect(host.inFlight).toBe(0);
    expect(held.asked[0]?.signal?.aborted).toBe(true);
    // A resend now runs the step again rather than getting the reply of the stopped run.
    sendStep('t7.think.1');
    await expect.poll(() => held.asked.length).toBe(2);
  });

  it('answers worker_stopped for the steps it cuts short when it stops, so the workflow sends them elsewhere', async () => {
    const step = sendStep('t8.think.1');
    await expect.poll(() => held.asked.length).toBe(1);
    await host.stop();
    expect(step.reply()).toMatchObject({ ok: false, error: { code: 'worker_stopped' } });
    expect(bus.hasListener(subjects.agent('timed', 'thinker'))).toBe(false);
  });

  it('runs beside another host in the same process, each with its own host actor: one stopping leaves the other’s steps running', async () => {
    const otherModel = heldModel();
    const other = startAgentHost({
      bus,
      pipeline: 'other',
      agents: [
        {
          name: 'thinker',
          instructions: 'Think.',
          model: otherModel.model,
          tools: [],
          rules: [],
          maxTurns: 2,
        },
      ],
      registry: new ToolRegistry(),
      workspaceRoot: root,
      logger: silent,
      clock,
    });
    try {
      const here = sendStep('t9.think.1');
      const received: unknown[] = [];
      bus.requestReplies(
        subjects.agent('other', 'thinker'),
        {
          stepId: 't9.think.1',
          taskId: 't9',
          pipeline: 'other',
          agent: 'thinker',
          step: 'think',
          round: 1,
          goal: 'think it over',
          context: [],
          expect: 'text',
        } satisfies AgentStepRequest,
        (message) => {
          if (message.ok) received.push(JSON.parse(new TextDecoder().decode(message.data)));
        },
      );
      // The same step id on both hosts: each host's actor has its own children.
      await expect.poll(() => [held.asked.length, otherModel.asked.length]).toEqual([1, 1]);

      await host.stop();
      expect(here.reply()).toMatchObject({ ok: false, error: { code: 'worker_stopped' } });
      expect(otherModel.asked[0]?.signal?.aborted).toBe(false);
      otherModel.answer('still thinking here');
      await expect
        .poll(() => received.map((m) => AgentStepReply.safeParse(m)).find((r) => r.success)?.data)
        .toMatchObject({ ok: true, output: 'still thinking here' });
      expect(other.inFlight).toBe(0);
    } finally {
      await other.stop();
    }
  });

  it('serves a step whose id is __proto__ like any other, and the steps after it', async () => {
    // Any string is a step id to the wire; one a plain object inherits once stopped the host's actor for good.
    const odd = sendStep('__proto__');
    await expect.poll(() => held.asked.length).toBe(1);
    held.answer('odd but fine');
    await expect
      .poll(() => odd.reply())
      .toMatchObject({ ok: true, stepId: '__proto__', output: 'odd but fine' });

    const next = sendStep('t10.think.1');
    await expect.poll(() => held.asked.length).toBe(2);
    held.answer('next');
    await expect.poll(() => next.reply()).toMatchObject({ ok: true, output: 'next' });
    expect(host.inFlight).toBe(0);
  });
});
