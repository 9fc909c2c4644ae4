import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { type ModelProvider, type ModelResponse, Script, ScriptedProvider } from '@troupe/llm';
import type { AgentStepRequest, TroupeEvent } from '@troupe/protocol';
import { SimulatedClock } from '@troupe/testkit';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import type { AgentDefinition } from '../../src/agent/agentDefinition.ts';
import type { AgentMachineInput } from '../../src/agent/agentMachine.ts';
import { type StepDeps, startAgentStep } from '../../src/agent/agentStep.ts';
import { type AgentActorRef, StepActors } from '../../src/agent/stepActors.ts';
import { EventFactory } from '../../src/events/eventFactory.ts';
import { defineTool, ToolRegistry } from '../../src/tools/index.ts';

const roots: string[] = [];
afterEach(async () => {
  await Promise.all(roots.splice(0).map((dir) => rm(dir, { recursive: true, force: true })));
});

const requestOf = (n: number): AgentStepRequest => ({
  stepId: `task-${n}.code.1`,
  taskId: `task-${n}`,
  pipeline: 'demo',
  agent: 'coder',
  step: 'code',
  round: 1,
  goal: 'say hello',
  context: [],
  expect: 'text',
});

/** A model that answers each call when the test says so. */
function heldModel(): { provider: ModelProvider; calls: number; answer(content: string): void } {
  const pending: ((response: ModelResponse) => void)[] = [];
  const held = {
    calls: 0,
    provider: {
      provider: 'held',
      model: 'held-1',
      complete: () =>
        new Promise<ModelResponse>((resolve) => {
          held.calls += 1;
          pending.push(resolve);
        }),
    },
    answer: (content: string) =>
      pending.shift()?.({
        content,
        toolCalls: [],
        usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0 },
        finishReason: 'stop',
        model: 'held-1',
      }),
  };
  return held;
}

function model(script: unknown): ModelProvider {
  return new ScriptedProvider(Script.parse(script));
}

const coder = (provider: ModelProvider): AgentDefinition => ({
  name: 'coder',
  instructions: 'You say hello.',
  model: provider,
  tools: [],
  rules: [],
  maxTurns: 3,
});

async function hostDeps(clock: SimulatedClock, overrides: Partial<StepDeps> = {}) {
  const root = await mkdtemp(path.join(os.tmpdir(), 'troupe-step-actors-'));
  roots.push(root);
  const actors = new StepActors(clock);
  const events: TroupeEvent[] = [];
  const deps: StepDeps = {
    registry: new ToolRegistry(),
    workspaceRoot: root,
    clock,
    events: new EventFactory(clock),
    publish: (event) => events.push(event),
    actors,
    ...overrides,
  };
  return { deps, actors, events };
}

const inputOf = (stepId: string): AgentMachineInput => ({
  agent: 'coder',
  stepId,
  messages: [{ role: 'user', content: 'hi' }],
  tools: [],
  maxTurns: 1,
  expect: 'text',
  services: {
    callModel: () => new Promise(() => {}),
    runTools: async () => [],
    compactConversation: () => new Promise(() => {}),
  },
});

describe('StepActors: one host actor, each step’s agent actor its child', () => {
  it('runs the steps under way as its children, and drops each once its step has ended', async () => {
    const clock = new SimulatedClock();
    const { deps, actors, events } = await hostDeps(clock);
    const slow = coder(model({ agents: { coder: [{ content: 'hello', delayMs: 60_000 }] } }));
    const first = startAgentStep(slow, requestOf(1), deps);
    const second = startAgentStep(slow, requestOf(2), deps);
    expect(actors.size).toBe(2);
    // Heard from before they started: each step's first model request is published.
    await vi.waitFor(() => expect(events.filter((e) => e.kind === 'llm.request')).toHaveLength(2));

    first.stop({ why: 'aborted' });
    expect(await first.reply).toMatchObject({ ok: false, error: { code: 'aborted' } });
    expect(actors.size).toBe(1);
    second.stop({ why: 'worker_stopping' });
    expect(await second.reply).toMatchObject({ ok: false, error: { code: 'worker_stopped' } });
    expect(actors.size).toBe(0);
    // A step whose actor has ended may run again under the same id (a resend after an orphaned run).
    const again = startAgentStep(
      coder(model({ agents: { coder: [{ content: 'hi again' }] } })),
      requestOf(1),
      deps,
    );
    expect(await again.reply).toMatchObject({ ok: true, output: 'hi again' });
    expect(actors.size).toBe(0);
  });

  it('fails only the step whose agent actor errored: the host actor and the other steps go on', async () => {
    const clock = new SimulatedClock();
    // Asked whom a timed-out step waits on, this gate throws inside the agent actor's `halt` action: an actor error.
    const { deps, actors } = await hostDeps(clock, {
      human: {
        approve: async () => ({ decision: 'deny', reason: 'no' }),
        ask: async () => 'no',
        waitingOn: () => {
          throw new Error('the gate broke');
        },
      },
    });
    const held = heldModel();
    const breaking = startAgentStep(coder(held.provider), { ...requestOf(1), timeoutMs: 1_000 }, deps);
    const neighbour = startAgentStep(coder(held.provider), requestOf(2), deps);
    await vi.waitFor(() => expect(held.calls).toBe(2));

    clock.advance(1_000);
    expect(await breaking.reply).toMatchObject({
      ok: false,
      stepId: 'task-1.code.1',
      error: { code: 'agent_crashed', message: 'the gate broke' },
    });
    expect(actors.size).toBe(1);

    // The neighbour's call was the second asked; the first, the broken step's, was abandoned.
    held.answer('ignored');
    held.answer('late but fine');
    expect(await neighbour.reply).toMatchObject({ ok: true, output: 'late but fine' });
    const later = startAgentStep(
      coder(model({ agents: { coder: [{ content: 'still here' }] } })),
      requestOf(3),
      deps,
    );
    expect(await later.reply).toMatchObject({ ok: true, output: 'still here' });
    expect(actors.size).toBe(0);
  });

  it('refuses a second actor under the id of one still running, which the host could not tell apart', () => {
    const actors = new StepActors(new SimulatedClock());
    const listened: string[] = [];
    actors.spawn('step-1', inputOf('step-1'), (agent) => listened.push(agent.id));
    expect(() => actors.spawn('step-1', inputOf('step-1'), () => {})).toThrow(
      'step step-1 has an agent actor running here already',
    );
    expect(listened).toEqual(['s0']);
    expect(actors.size).toBe(1);
    actors.stop();
  });

  it('names its actors by reused slots, not step ids: 200 steps one after another use one id, however each ended', async () => {
    // XState memoises a machine's transitions by event type, and a child's end is named after its id: one id a step
    // would grow the shared group machine by an entry a step, for the life of the process.
    const clock = new SimulatedClock();
    const { deps, actors } = await hostDeps(clock);
    const ids = new Set<string>();
    const spawn = deps.actors?.spawn.bind(deps.actors);
    const seen: StepDeps = {
      ...deps,
      actors: Object.assign(Object.create(actors) as StepActors, {
        spawn: (id: string, input: AgentMachineInput, listen: (agent: AgentActorRef) => void) =>
          spawn?.(id, input, (agent) => {
            ids.add(agent.id);
            listen(agent);
          }),
      }),
    };
    for (let n = 0; n < 200; n++) {
      // Each step is its group's only one while it runs, whichever group its id falls in: slot s0 each time.
      const step = startAgentStep(
        coder(model({ agents: { coder: [{ content: `hello ${n}` }] } })),
        requestOf(n),
        seen,
      );
      if (n % 2 === 1) step.stop({ why: 'aborted' });
      await step.reply;
    }
    expect(ids.size).toBe(1);
    expect(actors.size).toBe(0);
    actors.stop();
  });

  it('holds many steps at once, spread over its groups, and stops them all with the host', () => {
    const actors = new StepActors(new SimulatedClock());
    const agents = Array.from(
      { length: 300 },
      (_, i) => actors.spawn(`task-${i}.code.1`, inputOf(`s${i}`), () => {}).agent,
    );
    expect(actors.size).toBe(300);
    expect(new Set(agents.map((agent) => agent.getSnapshot().status))).toEqual(new Set(['active']));
    actors.stop();
    expect(new Set(agents.map((agent) => agent.getSnapshot().status))).toEqual(new Set(['stopped']));
  });

  it('drops an actor whose listener threw, stopping it at once, and spawns none once stopped', () => {
    const actors = new StepActors(new SimulatedClock());
    expect(() =>
      actors.spawn('step-1', inputOf('step-1'), () => {
        throw new Error('cannot listen');
      }),
    ).toThrow('cannot listen');
    expect(actors.size).toBe(0);
    // Its step no longer runs here: sent again, it is spawned.
    actors.spawn('step-1', inputOf('step-1'), () => {});
    const running = actors.spawn('step-2', inputOf('step-2'), () => {}).agent;
    actors.stop();
    expect(running.getSnapshot().status).toBe('stopped');
    expect(() => actors.spawn('step-3', inputOf('step-3'), () => {})).toThrow('the agent host has stopped');
  });

  it('replies worker_stopped for a step still running when the host actor stops, never a rejected reply', async () => {
    const clock = new SimulatedClock();
    const { deps, actors } = await hostDeps(clock);
    const held = heldModel();
    const step = startAgentStep(coder(held.provider), requestOf(1), deps);
    await vi.waitFor(() => expect(held.calls).toBe(1));

    // The host stops its actor only once its steps have replied; a step caught by it anyway is sent elsewhere.
    actors.stop();
    await expect(step.reply).resolves.toMatchObject({
      ok: false,
      stepId: 'task-1.code.1',
      error: { code: 'worker_stopped', message: 'the agent host stopped before step task-1.code.1 ended' },
    });
  });

  it('fails a step started from inside its group’s own transition cleanly: no actor of it runs, and a resend runs it', async () => {
    const clock = new SimulatedClock();
    // A step that lands in the group of task-0's step (the same for every host: a step's group is its id's).
    const probe = new StepActors(clock);
    const first = probe.spawn(requestOf(0).stepId, inputOf('first'), () => {}).agent;
    const n = Array.from({ length: 300 }, (_, i) => i + 1).find(
      (i) => probe.spawn(requestOf(i).stepId, inputOf('other'), () => {}).agent._parent === first._parent,
    );
    probe.stop();
    if (n === undefined) throw new Error('no step of the 300 lands in the group of task-0');

    const held = heldModel();
    const nestedModel = heldModel();
    const published: TroupeEvent[] = [];
    let nested: ReturnType<typeof startAgentStep> | undefined;
    const { deps, actors } = await hostDeps(clock, {
      publish: (event) => {
        published.push(event);
        // Heard at once, as an in-process bus may deliver: task-0's first event is emitted while its group spawns it.
        if (event.kind === 'llm.request' && event.taskId === 'task-0')
          nested ??= startAgentStep(coder(nestedModel.provider), requestOf(n), deps);
      },
    });
    startAgentStep(coder(held.provider), requestOf(0), deps);
    if (!nested) throw new Error('task-0 published no llm.request');
    expect(await nested.reply).toMatchObject({
      ok: false,
      stepId: `task-${n}.code.1`,
      error: { code: 'agent_crashed' },
    });
    expect(actors.size).toBe(1);

    const again = startAgentStep(
      coder(model({ agents: { coder: [{ content: 'ran again' }] } })),
      requestOf(n),
      deps,
    );
    expect(await again.reply).toMatchObject({ ok: true, output: 'ran again' });
    // The failed start's actor never asked its model nor published anything.
    expect(nestedModel.calls).toBe(0);
    expect(published.filter((event) => event.taskId === `task-${n}`).map((event) => event.kind)).toEqual([
      'llm.request',
      'llm.response',
    ]);
    expect(actors.size).toBe(1);
  });

  it('fails two steps started from inside one group’s transition cleanly: neither actor runs, though both were given one slot', async () => {
    // Each takes the lowest slot free as it is asked (08facab): neither is spawned yet, so both are given the same.
    const clock = new SimulatedClock();
    // Two steps that land in the group of task-0's step.
    const probe = new StepActors(clock);
    const first = probe.spawn(requestOf(0).stepId, inputOf('first'), () => {}).agent;
    const [n, m] = Array.from({ length: 600 }, (_, i) => i + 1).filter(
      (i) => probe.spawn(requestOf(i).stepId, inputOf('other'), () => {}).agent._parent === first._parent,
    );
    probe.stop();
    if (n === undefined || m === undefined)
      throw new Error('no two steps of the 600 land in the group of task-0');

    const held = heldModel();
    const nestedModel = heldModel();
    const nested: ReturnType<typeof startAgentStep>[] = [];
    const { deps, actors } = await hostDeps(clock, {
      publish: (event) => {
        // Heard at once, as an in-process bus may deliver: both start while task-0's group spawns it.
        if (event.kind === 'llm.request' && event.taskId === 'task-0' && nested.length === 0)
          nested.push(
            startAgentStep(coder(nestedModel.provider), requestOf(n), deps),
            startAgentStep(coder(nestedModel.provider), requestOf(m), deps),
          );
      },
    });
    startAgentStep(coder(held.provider), requestOf(0), deps);
    const replies = await Promise.all(nested.map((step) => step.reply));
    expect(replies.map((reply) => reply.ok)).toEqual([false, false]);
    // Neither failed start's actor asks its model (one left running unheard would, with nobody to stop it).
    await vi.waitFor(() => expect(actors.size).toBe(1));
    // A resend runs, after which neither failed start has asked its model.
    const again = startAgentStep(
      coder(model({ agents: { coder: [{ content: 'ran again' }] } })),
      requestOf(n),
      deps,
    );
    expect(await again.reply).toMatchObject({ ok: true, output: 'ran again' });
    expect(nestedModel.calls).toBe(0);
    expect(actors.size).toBe(1);
  });

  it('leaves nothing in its groups or its scheduler once many steps have ended, however each ended', async () => {
    const clock = new SimulatedClock();
    const toolSignals: AbortSignal[] = [];
    const modelSignals: AbortSignal[] = [];
    const registry = new ToolRegistry()
      .register(
        defineTool({
          name: 'hang',
          description: 'waits until stopped',
          input: z.object({}),
          run: (_input, ctx) =>
            new Promise<string>((_resolve, reject) => {
              toolSignals.push(ctx.signal);
              ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason));
            }),
        }),
      )
      .register(
        defineTool({
          name: 'boom',
          description: 'throws',
          input: z.object({}),
          run: async () => {
            throw new Error('the tool broke');
          },
        }),
      );
    const { deps, actors } = await hostDeps(clock, { registry });
    const reply = (content: string, tool?: string): ModelResponse => ({
      content,
      toolCalls: tool ? [{ id: 'call-1', name: tool, arguments: '{}' }] : [],
      usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0 },
      finishReason: tool ? 'tool_calls' : 'stop',
      model: 'm-1',
    });
    // Kind 0 waits on its model until stopped, 1 on its tool; 2's tool throws and it ends; 3 ends at once.
    const modelOf = (kind: number): ModelProvider => {
      let calls = 0;
      return {
        provider: 'fake',
        model: 'm-1',
        complete: (request) => {
          calls += 1;
          if (kind === 0)
            return new Promise((_resolve, reject) => {
              if (request.signal) modelSignals.push(request.signal);
              request.signal?.addEventListener('abort', () => reject(request.signal?.reason));
            });
          if (kind === 1) return Promise.resolve(reply('', 'hang'));
          if (kind === 2) return Promise.resolve(calls === 1 ? reply('', 'boom') : reply('after the error'));
          return Promise.resolve(reply('done'));
        },
      };
    };
    const rules = [
      { tool: 'hang', decision: 'allow' },
      { tool: 'boom', decision: 'allow' },
    ] as AgentDefinition['rules'];
    const steps = Array.from({ length: 400 }, (_, i) =>
      // Each with a time limit: one delayed event in the host's scheduler while it runs.
      startAgentStep(
        { ...coder(modelOf(i % 4)), tools: ['hang', 'boom'], rules },
        { ...requestOf(i), timeoutMs: 600_000 },
        deps,
      ),
    );
    // A generous wait: 400 steps' first turns, on two cores shared with other work.
    await vi.waitFor(
      () => {
        expect(toolSignals).toHaveLength(100);
        expect(modelSignals).toHaveLength(100);
        expect(actors.size).toBe(200);
      },
      { timeout: 30_000 },
    );
    steps.forEach((step, i) => {
      if (i % 4 < 2) step.stop({ why: 'aborted' });
    });
    const replies = await Promise.all(steps.map((step) => step.reply));

    expect(new Set(replies.map((r, i) => `${i % 4} ${r.ok ? r.output : r.error.code}`))).toEqual(
      new Set(['0 aborted', '1 aborted', '2 after the error', '3 done']),
    );
    // A stop reached the model call before any tool was called, and the tool call mid-run.
    expect(modelSignals.every((signal) => signal.aborted)).toBe(true);
    expect(toolSignals.every((signal) => signal.aborted)).toBe(true);
    expect(actors.size).toBe(0);
    const probe = actors.spawn('probe', inputOf('probe'), () => {}).agent;
    expect(Object.keys(probe.system.getSnapshot()._scheduledEvents)).toEqual([]);
    actors.stop();
  });

  it('runs steps whose ids are names a plain object inherits (__proto__, constructor…), and the host goes on', async () => {
    // A step id is any string up to 200 characters: a request sent by hand may carry any of these.
    const clock = new SimulatedClock();
    const { deps, actors } = await hostDeps(clock);
    for (const stepId of ['__proto__', 'constructor', 'toString', 'hasOwnProperty']) {
      const step = startAgentStep(
        coder(model({ agents: { coder: [{ content: `ran ${stepId}` }] } })),
        { ...requestOf(1), stepId },
        deps,
      );
      expect(await step.reply).toMatchObject({ ok: true, stepId, output: `ran ${stepId}` });

      // Still told apart from a second actor under its id while it runs.
      const running = actors.spawn(stepId, inputOf(stepId), () => {}).agent;
      expect(() => actors.spawn(stepId, inputOf(stepId), () => {})).toThrow(
        `step ${stepId} has an agent actor running here already`,
      );
      running.send({ type: 'stop', stop: { why: 'aborted' } });
      expect(actors.size).toBe(0);
    }
    const after = startAgentStep(
      coder(model({ agents: { coder: [{ content: 'still here' }] } })),
      requestOf(2),
      deps,
    );
    expect(await after.reply).toMatchObject({ ok: true, output: 'still here' });
    expect(actors.size).toBe(0);
  });
});
