import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ModelProvider, ModelRequest, ModelResponse } from '@troupe/llm';
import { AgentStepReply, type AgentStepRequest, type StepHeartbeat, subjects } from '@troupe/protocol';
import { captureLogger, MemoryBus, SimulatedClock } from '@troupe/testkit';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { type AgentHost, type AgentHostOptions, startAgentHost } from '../../src/agent/agentHost.ts';
import { type LocalStepHooks, requestLocally } from '../../src/agent/localSteps.ts';
import type { HostedAgent } from '../../src/agent/remoteAgent.ts';
import { createLogger } from '../../src/logging/logger.ts';
import { ToolRegistry } from '../../src/tools/toolRegistry.ts';
import { recordingHeartbeats } from './hostFakes.ts';

/** A model that answers only when the test says so, and is aborted with its step. */
function heldModel() {
  const asked: ModelRequest[] = [];
  const aborted: ModelRequest[] = [];
  const answers: ((response: ModelResponse) => void)[] = [];
  const model: ModelProvider = {
    provider: 'held',
    model: 'held-1',
    complete: (request) =>
      new Promise<ModelResponse>((resolve, reject) => {
        asked.push(request);
        answers.push(resolve);
        request.signal?.addEventListener(
          'abort',
          () => {
            aborted.push(request);
            answers.splice(answers.indexOf(resolve), 1);
            reject(request.signal?.reason);
          },
          { once: true },
        );
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
  return { model, asked, aborted, answer };
}

const silent = createLogger({ level: 'silent' });

const request = (stepId: string, extra: Partial<AgentStepRequest> = {}): AgentStepRequest => ({
  stepId,
  taskId: stepId.split('.')[0] ?? stepId,
  pipeline: 'local',
  agent: 'thinker',
  step: 'think',
  round: 1,
  goal: 'think it over',
  context: [],
  expect: 'text',
  priorModelCalls: 0,
  heartbeatMs: 5_000,
  timeoutMs: 60_000,
  ...extra,
});

describe('steps taken in this process (LocalSteps)', () => {
  let root: string;
  let clock: SimulatedClock;
  let bus: MemoryBus;
  let held: ReturnType<typeof heldModel>;
  let sent: ReturnType<typeof recordingHeartbeats>;
  let hosts: AgentHost[];
  let activity: StepHeartbeat[];
  const hooks: LocalStepHooks = { onActivity: (heartbeat) => activity.push(heartbeat) };

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'troupe-local-'));
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });
  beforeEach(() => {
    clock = new SimulatedClock();
    bus = new MemoryBus({ clock });
    held = heldModel();
    sent = recordingHeartbeats();
    hosts = [];
    activity = [];
    return async () => {
      for (const host of hosts) await host.stop();
    };
  });

  const host = (extra: Partial<AgentHostOptions> = {}) => {
    const started = startAgentHost({
      bus,
      pipeline: 'local',
      agents: [
        { name: 'thinker', instructions: 'Think.', model: held.model, tools: [], rules: [], maxTurns: 2 },
      ],
      registry: new ToolRegistry(),
      workspaceRoot: root,
      logger: silent,
      clock,
      heartbeats: sent.heartbeats,
      version: 'v1',
      maxLocalSteps: 4,
      ...extra,
    });
    hosts.push(started);
    return started;
  };
  const agentMessages = () => bus.messages.filter((m) => m.subject.startsWith('troupe.agents.'));

  it('takes a step with no message on troupe.agents.>, and no heartbeat, though it lasts', async () => {
    const here = host();
    const call = here.local.tryTake(request('t1.think.1'), hooks);
    expect(call).toBeDefined();
    await expect.poll(() => held.asked.length).toBe(1);
    expect(here.inFlight).toBe(1);
    clock.advance(30_000);
    held.answer('Thought.');
    expect(AgentStepReply.parse(await call?.reply)).toMatchObject({ ok: true, output: 'Thought.' });
    expect(agentMessages()).toEqual([]);
    expect(sent.beats).toEqual([]);
    expect(sent.stopped).toEqual([]);
    // Its events are published as a step's over NATS are (the workflow publishes step.started and step.completed).
    expect(bus.events.map((e) => e.kind)).toEqual(['llm.request', 'llm.response']);
    await expect.poll(() => here.inFlight).toBe(0);
    expect(sent.stopped).toEqual([]);
  });

  it('stops a step parked while its model waits (past parkAfterMs) with its host: worker_stopped, the call aborted', async () => {
    const here = host({ parkAfterMs: 5_000 });
    const call = here.local.tryTake(request('t19.think.1'), hooks);
    await expect.poll(() => held.asked.length).toBe(1);
    clock.advance(30_000);
    await here.stop();
    expect(AgentStepReply.parse(await call?.reply)).toMatchObject({
      ok: false,
      error: { code: 'worker_stopped' },
    });
    expect(held.aborted).toHaveLength(1);
    expect(bus.events.map((e) => e.kind)).toEqual(['llm.request']);
  });

  it('refuses a parkAfterMs that is negative or not a number, at start', () => {
    for (const parkAfterMs of [-1, Number.NaN, Number.POSITIVE_INFINITY])
      expect(() => host({ parkAfterMs })).toThrow(
        `parkAfterMs must be 0 (parking off) or a number of milliseconds above 0, not ${parkAfterMs}`,
      );
  });

  it('tells the caller what a heartbeat would say, only when it changes: a model call that has lasted 100 ms, then its end', async () => {
    const here = host();
    const call = here.local.tryTake(request('t2.think.1'), hooks);
    await expect.poll(() => held.asked.length).toBe(1);
    clock.advance(99);
    expect(activity).toEqual([]);
    clock.advance(1);
    expect(activity).toEqual([{ stepId: 't2.think.1', heartbeat: true, waitingOnModel: true }]);
    clock.advance(20_000);
    expect(activity).toHaveLength(1);
    held.answer('Thought.');
    await call?.reply;
    expect(activity).toEqual([
      { stepId: 't2.think.1', heartbeat: true, waitingOnModel: true },
      { stepId: 't2.think.1', heartbeat: true },
    ]);
    expect(sent.beats).toEqual([]);
  });

  it('takes no more once as many steps as maxLocalSteps are in flight here, from NATS or not', async () => {
    const here = host({ maxLocalSteps: 1 });
    expect(here.local.tryTake(request('t3.think.1'), hooks)).toBeDefined();
    expect(here.local.tryTake(request('t4.think.1'), hooks)).toBeUndefined();
    await expect.poll(() => held.asked.length).toBe(1);
    held.answer('One.');
    await expect.poll(() => here.inFlight).toBe(0);
    // A step from NATS fills the host as well.
    bus.requestReplies(subjects.agent('local', 'thinker'), request('t5.think.1'), () => {});
    await expect.poll(() => here.inFlight).toBe(1);
    expect(here.local.tryTake(request('t6.think.1'), hooks)).toBeUndefined();
    expect(host({ maxLocalSteps: 0 }).local.tryTake(request('t7.think.1'), hooks)).toBeUndefined();
  });

  it('takes no step of an agent, a pipeline or a version it does not serve', () => {
    const here = host();
    expect(here.local.tryTake(request('t8.think.1', { agent: 'writer' }), hooks)).toBeUndefined();
    expect(here.local.tryTake(request('t8.think.1', { pipeline: 'other' }), hooks)).toBeUndefined();
    expect(here.local.tryTake(request('t8.think.1', { version: 'v2' }), hooks)).toBeUndefined();
    expect(here.local.tryTake(request('t8.think.1', { version: 'v1' }), hooks)).toBeDefined();
    expect(here.local.tryTake(request('t9.think.1'), hooks)).toBeDefined();
  });

  it('takes a step of another version whose agent is loaded here (loadedAgentOf), and runs that version’s agent', async () => {
    const v2 = heldModel();
    const thinkerV2: HostedAgent = {
      name: 'thinker',
      instructions: 'Think as v2.',
      model: v2.model,
      tools: [],
      rules: [],
      maxTurns: 2,
    };
    const here = host({
      olderAgents: ['writer'],
      loadedAgentOf: (version, agent) =>
        version === 'v2'
          ? ({ thinker: thinkerV2, writer: { ...thinkerV2, name: 'writer' } } as const)[agent]
          : undefined,
    });
    const call = here.local.tryTake(request('t14.think.1', { version: 'v2' }), hooks);
    await expect.poll(() => v2.asked.length).toBe(1);
    expect(held.asked).toEqual([]);
    v2.answer('Thought as v2.');
    expect(await call?.reply).toMatchObject({ ok: true, output: 'Thought as v2.' });
    // Another version's agent this host serves (one its own version lacks) is taken too.
    expect(
      here.local.tryTake(request('t15.write.1', { version: 'v2', agent: 'writer' }), hooks),
    ).toBeDefined();
    // A version not loaded here, an agent it does not serve, and its own version's step of an agent it lacks go over NATS.
    expect(here.local.tryTake(request('t16.think.1', { version: 'v3' }), hooks)).toBeUndefined();
    expect(
      host({ loadedAgentOf: () => thinkerV2 }).local.tryTake(
        request('t17.write.1', { version: 'v2', agent: 'writer' }),
        hooks,
      ),
    ).toBeUndefined();
    expect(
      here.local.tryTake(request('t18.write.1', { version: 'v1', agent: 'writer' }), hooks),
    ).toBeUndefined();
  });

  it('logs a step taken here as taken and answered, at the level and with the fields of the NATS lines, plus local', async () => {
    const here = host();
    const { logger, lines } = captureLogger('debug');
    const subject = subjects.agent('local', 'thinker');
    const meta = { taskId: 't19', from: 'workflow', to: 'thinker', kind: 'agent.step' };
    const reply = requestLocally(here.local, request('t19.think.1'), {
      timeoutMs: 60_000,
      clock,
      log: { logger, level: 'debug', subject, meta },
    });
    await expect.poll(() => held.asked.length).toBe(1);
    expect(lines).toEqual([
      expect.objectContaining({
        level: 20,
        dir: 'out',
        subject,
        ...meta,
        local: true,
        msg: '→ troupe.agents.local.thinker (in this process)',
      }),
    ]);
    clock.advance(1_500);
    held.answer('Thought.');
    await reply;
    expect(lines[1]).toMatchObject({
      level: 20,
      dir: 'in',
      subject,
      taskId: 't19',
      from: 'thinker',
      to: 'workflow',
      kind: 'agent.reply',
      local: true,
      ok: true,
      durationMs: 1_500,
      msg: '← troupe.agents.local.thinker (in this process): ok in 1500 ms',
    });
    // A step that fails (here: its time runs out) says its code.
    const late = requestLocally(here.local, request('t20.think.1'), {
      timeoutMs: 1_000,
      clock,
      log: { logger, level: 'debug', subject, meta: { ...meta, taskId: 't20' } },
    });
    const failed = expect(late).rejects.toMatchObject({ code: 'timeout' });
    clock.advance(1_000);
    await failed;
    expect(lines[3]).toMatchObject({
      taskId: 't20',
      local: true,
      ok: false,
      code: 'timeout',
      durationMs: 1_000,
    });
    expect(lines).toHaveLength(4);
  });

  it('writes nothing, and builds no line, when the level is off', async () => {
    const here = host();
    const { logger, lines } = captureLogger('info');
    const debug = vi.spyOn(logger, 'debug');
    const reply = requestLocally(here.local, request('t21.think.1'), {
      timeoutMs: 60_000,
      clock,
      log: { logger, level: 'debug', subject: subjects.agent('local', 'thinker'), meta: {} },
    });
    await expect.poll(() => held.asked.length).toBe(1);
    held.answer('Thought.');
    await reply;
    expect(lines).toEqual([]);
    expect(debug).not.toHaveBeenCalled();
  });

  it('takes none once it is stopping', async () => {
    const here = host();
    const stopping = here.stop();
    expect(here.local.tryTake(request('t10.think.1'), hooks)).toBeUndefined();
    await stopping;
  });

  it('joins a step sent again under the same id to its run, here or from NATS: the model is asked once', async () => {
    const here = host();
    const first = here.local.tryTake(request('t11.think.1'), hooks);
    await expect.poll(() => held.asked.length).toBe(1);
    const again = here.local.tryTake(request('t11.think.1'), hooks);
    const overNats: unknown[] = [];
    bus.requestReplies(subjects.agent('local', 'thinker'), request('t11.think.1'), (message) => {
      if (message.ok) overNats.push(JSON.parse(new TextDecoder().decode(message.data)));
    });
    await bus.settled();
    held.answer('Once.');
    expect(await first?.reply).toMatchObject({ ok: true, output: 'Once.' });
    expect(await again?.reply).toMatchObject({ ok: true, output: 'Once.' });
    await expect
      .poll(() => overNats.find((m) => AgentStepReply.safeParse(m).success))
      .toMatchObject({
        output: 'Once.',
      });
    expect(held.asked).toHaveLength(1);
    // A resend after the end gets the reply it gave, running nothing.
    const late = here.local.tryTake(request('t11.think.1'), hooks);
    expect(await late?.reply).toMatchObject({ ok: true, output: 'Once.' });
    expect(held.asked).toHaveLength(1);
  });

  it('stops a run left by its workflow (cancel) soon after: its model call is aborted, its reply says aborted, and a resend runs it again', async () => {
    const here = host();
    const call = here.local.tryTake(request('t12.think.1'), hooks);
    await expect.poll(() => held.asked.length).toBe(1);
    call?.cancel();
    expect(await call?.reply).toMatchObject({ ok: false, error: { code: 'aborted' } });
    // Its task's end would stop it at once, with the ending; no end comes, so it stops 2 s after it was left.
    clock.advance(1_999);
    await bus.settled();
    expect(held.aborted).toEqual([]);
    clock.advance(1);
    await expect.poll(() => held.aborted.length).toBe(1);
    await expect.poll(() => here.inFlight).toBe(0);
    const again = here.local.tryTake(request('t12.think.1'), hooks);
    await expect.poll(() => held.asked.length).toBe(2);
    held.answer('Again.');
    expect(await again?.reply).toMatchObject({ ok: true, output: 'Again.' });
  });

  it('keeps a run a resend over NATS joined going when the one here leaves', async () => {
    const here = host();
    const call = here.local.tryTake(request('t13.think.1'), hooks);
    await expect.poll(() => held.asked.length).toBe(1);
    const overNats: unknown[] = [];
    bus.requestReplies(subjects.agent('local', 'thinker'), request('t13.think.1'), (message) => {
      if (message.ok) overNats.push(JSON.parse(new TextDecoder().decode(message.data)));
    });
    await bus.settled();
    call?.cancel();
    await bus.settled();
    expect(held.aborted).toEqual([]);
    held.answer('Kept.');
    await expect
      .poll(() => overNats.find((m) => AgentStepReply.safeParse(m).success))
      .toMatchObject({
        output: 'Kept.',
      });
  });
});
