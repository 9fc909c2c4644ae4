import type { ModelProvider, ModelRequest, ModelResponse } from '@troupe/llm';
import type { AgentStepRequest, TroupeEvent } from '@troupe/protocol';
import { SimulatedClock } from '@troupe/testkit';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { AgentActorInput, AgentMachineInput } from '../../src/agent/agentMachine.ts';
import { CROWD, CROWD_MIN_WAIT_MS } from '../../src/agent/agentRun.ts';
import { type AgentStep, startAgentStep } from '../../src/agent/agentStep.ts';
import { groupOf, StepActors } from '../../src/agent/stepActors.ts';
import { EventFactory } from '../../src/events/eventFactory.ts';
import { coder, codeStep, removeWorkspaces, stepDeps } from './stepSetup.ts';

afterEach(removeWorkspaces);

const PARK_AFTER_MS = 5_000;

/** A call of the held model: its request, and its answer or failure, given by the test. */
interface HeldCall {
  request: ModelRequest;
  answer(response: Partial<ModelResponse>): void;
  fail(error: Error): void;
}

/**
 * A model whose every call waits until the test answers it, as a slow model's does; an aborted call rejects, as the
 * real SDKs' do.
 */
function heldModel(): { model: ModelProvider; calls: HeldCall[] } {
  const calls: HeldCall[] = [];
  return {
    calls,
    model: {
      provider: 'held',
      model: 'held-1',
      complete: (request) =>
        new Promise<ModelResponse>((resolve, reject) => {
          request.signal?.addEventListener('abort', () =>
            reject(Object.assign(new Error('Request was aborted.'), { name: 'AbortError' })),
          );
          calls.push({
            request,
            fail: reject,
            answer: (response) =>
              resolve({
                content: '',
                toolCalls: [],
                usage: { inputTokens: 10, outputTokens: 5, cachedTokens: 0 },
                finishReason: 'stop',
                model: 'held-1',
                ...response,
              }),
          });
        }),
    },
  };
}

const writeHello = {
  toolCalls: [{ id: 'call-w', name: 'write_file', arguments: '{"path":"notes/hello.md","content":"# Hi"}' }],
  finishReason: 'tool_calls' as const,
};

/** A step on a host's actors and a simulated clock, parked after {@link PARK_AFTER_MS} unless `parkAfterMs` says. */
async function hostedStep(
  request: AgentStepRequest = codeStep(),
  parkAfterMs = PARK_AFTER_MS,
  { alone = false }: { alone?: boolean } = {},
) {
  const clock = new SimulatedClock();
  const actors = new StepActors(clock);
  const { model, calls } = heldModel();
  const { deps, events } = await stepDeps({
    clock,
    events: new EventFactory(clock),
    ...(alone ? {} : { actors }),
    parkAfterMs,
  });
  const step = startAgentStep(coder(model), request, deps);
  await vi.waitFor(() => expect(calls).toHaveLength(1));
  return { clock, actors, calls, events, step };
}

/** What a step announced, without the ids and times of its events, nor how long its tools ran (on the system's clock). */
const announced = (events: TroupeEvent[]) =>
  events.map(({ kind, data }) => ({
    kind,
    data: { ...data, ...(kind === 'tool.result' ? { durationMs: 0 } : {}) },
  }));

/** The reply of `step`, once it came, or undefined while it has not. */
async function settled(step: AgentStep) {
  let reply: Awaited<AgentStep['reply']> | undefined;
  void step.reply.then((r) => {
    reply = r;
  });
  await new Promise((resolve) => setImmediate(resolve));
  return reply;
}

describe('a step whose model call waits long (parked)', () => {
  it('lets its agent actor go while it waits, and only after parkAfterMs', async () => {
    const { clock, actors, step } = await hostedStep();
    clock.advance(PARK_AFTER_MS - 1);
    expect(actors.size).toBe(1);
    clock.advance(1);
    expect(actors.size).toBe(0);
    expect(await settled(step)).toBeUndefined();
  });

  it('keeps its agent actor when parking is off (parkAfterMs 0)', async () => {
    const { clock, actors } = await hostedStep(codeStep(), 0);
    clock.advance(60_000);
    expect(actors.size).toBe(1);
  });

  it('wakes on its reply with the same events and reply as a step never parked, the model asked once a turn', async () => {
    const run = async (parkAfterMs: number) => {
      const { clock, actors, calls, events, step } = await hostedStep(codeStep(), parkAfterMs);
      clock.advance(6_000);
      expect(actors.size).toBe(parkAfterMs > 0 ? 0 : 1);
      calls[0]?.answer(writeHello);
      await vi.waitFor(() => expect(calls).toHaveLength(2));
      clock.advance(6_000);
      expect(actors.size).toBe(parkAfterMs > 0 ? 0 : 1);
      calls[1]?.answer({ content: 'Wrote notes/hello.md' });
      const reply = await step.reply;
      return { reply, events: announced(events), calls: calls.length, running: actors.size };
    };
    const parked = await run(PARK_AFTER_MS);
    const live = await run(0);
    expect(parked.reply).toMatchObject({ ok: true, output: 'Wrote notes/hello.md', turns: 2 });
    expect(parked).toEqual(live);
    expect(parked.events.filter((e) => e.kind === 'llm.request')).toHaveLength(2);
    expect(parked.running).toBe(0);
  });

  it('wakes on its model call’s failure with the same llm.error and reply as a step never parked', async () => {
    const run = async (parkAfterMs: number) => {
      const { clock, actors, calls, events, step } = await hostedStep(codeStep(), parkAfterMs);
      clock.advance(6_000);
      expect(actors.size).toBe(parkAfterMs > 0 ? 0 : 1);
      calls[0]?.fail(Object.assign(new Error('overloaded'), { code: 'model_overloaded' }));
      return { reply: await step.reply, events: announced(events), calls: calls.length };
    };
    const parked = await run(PARK_AFTER_MS);
    expect(parked.reply).toMatchObject({ ok: false, error: { code: 'model_failed' } });
    expect(parked.events.map((e) => e.kind)).toEqual(['llm.request', 'llm.error']);
    expect(parked).toEqual(await run(0));
  });

  it('parks and wakes a step whose actor is a root of its own (no host), with the same reply', async () => {
    const run = async (parkAfterMs: number) => {
      const { clock, calls, events, step } = await hostedStep(codeStep(), parkAfterMs, { alone: true });
      clock.advance(6_000);
      calls[0]?.answer({ content: 'Done' });
      return { reply: await step.reply, events: announced(events), calls: calls.length };
    };
    const parked = await run(PARK_AFTER_MS);
    expect(parked.reply).toMatchObject({ ok: true, output: 'Done', turns: 1 });
    expect(parked).toEqual(await run(0));
  });

  it('replies worker_stopped, as an actor stopped with its host does, when its host stopped while it was parked', async () => {
    const { clock, actors, calls, step } = await hostedStep();
    clock.advance(PARK_AFTER_MS);
    actors.stop();
    calls[0]?.answer({ content: 'too late' });
    expect(await step.reply).toMatchObject({
      ok: false,
      error: { code: 'worker_stopped', message: 'the agent host stopped before step task-1.code.1 ended' },
    });
  });

  it('replies worker_stopped at once, its model call aborted, when its host stops its actors while it is parked', async () => {
    const { clock, actors, calls, step } = await hostedStep(codeStep({ timeoutMs: 60_000 }));
    clock.advance(PARK_AFTER_MS);
    expect(actors.size).toBe(0);
    actors.stop();
    expect(await settled(step)).toMatchObject({ ok: false, error: { code: 'worker_stopped' } });
    expect(calls[0]?.request.signal?.aborted).toBe(true);
    expect(clock.pending()).toEqual([]);
  });

  it('stops when sent a stop while parked: replies aborted with what it spent, and aborts its model call', async () => {
    const { clock, actors, calls, events, step } = await hostedStep();
    clock.advance(PARK_AFTER_MS);
    expect(actors.size).toBe(0);
    step.stop({ why: 'task_ended', taskId: 'task-1', ending: { status: 'cancelled' } });
    expect(await step.reply).toMatchObject({
      ok: false,
      error: {
        code: 'aborted',
        message: 'step task-1.code.1 was aborted after 1 model call(s): its task has ended',
      },
      turns: 1,
    });
    expect(calls[0]?.request.signal?.aborted).toBe(true);
    expect(calls).toHaveLength(1);
    expect(events.map((e) => e.kind)).toEqual(['llm.request']);
  });

  it('stops at its time limit while parked, on the injected clock, as it does awake', async () => {
    const { clock, actors, calls, step } = await hostedStep(codeStep({ timeoutMs: 20_000 }));
    clock.advance(PARK_AFTER_MS);
    expect(actors.size).toBe(0);
    clock.advance(20_000 - PARK_AFTER_MS - 1);
    expect(await settled(step)).toBeUndefined();
    clock.advance(1);
    expect(await step.reply).toMatchObject({
      ok: false,
      error: { code: 'step_timeout', message: 'agent coder did not finish within the step timeout (20 s)' },
    });
    expect(calls[0]?.request.signal?.aborted).toBe(true);
    expect(clock.pending()).toEqual([]);
  });

  it('stops when its task’s deadline passes while parked, budget_exceeded, as it does awake', async () => {
    const budget = {
      deadline: new SimulatedClock().now() + 30_000,
      sources: { deadline: 'task timeout (30 s)' },
    };
    const { clock, actors, calls, step } = await hostedStep(codeStep({ budget }));
    clock.advance(PARK_AFTER_MS);
    expect(actors.size).toBe(0);
    clock.advance(30_000 - PARK_AFTER_MS - 1);
    expect(await settled(step)).toBeUndefined();
    clock.advance(1);
    expect(await step.reply).toMatchObject({ ok: false, error: { code: 'budget_exceeded' }, turns: 1 });
    expect(calls[0]?.request.signal?.aborted).toBe(true);
    expect(clock.pending()).toEqual([]);
  });

  it('stops at its time limit once woken, counting the time it slept', async () => {
    const { clock, actors, calls, step } = await hostedStep(codeStep({ timeoutMs: 20_000 }));
    clock.advance(10_000);
    expect(actors.size).toBe(0);
    calls[0]?.answer(writeHello);
    await vi.waitFor(() => expect(calls).toHaveLength(2));
    // Awake in its second call: 10 s of its 20 are left, whatever the woken actor's start.
    clock.advance(9_999);
    expect(await settled(step)).toBeUndefined();
    clock.advance(1);
    expect(await step.reply).toMatchObject({ ok: false, error: { code: 'step_timeout' } });
  });

  it('when paused while parked, takes its reply and stops before the tools it asks for, as it does awake', async () => {
    const run = async (parkAfterMs: number) => {
      const { clock, actors, calls, events, step } = await hostedStep(codeStep(), parkAfterMs);
      clock.advance(6_000);
      expect(actors.size).toBe(parkAfterMs > 0 ? 0 : 1);
      step.pause?.();
      calls[0]?.answer(writeHello);
      const reply = await step.reply;
      return { reply, events: announced(events), calls: calls.length };
    };
    const parked = await run(PARK_AFTER_MS);
    expect(parked.reply).toMatchObject({ ok: false, error: { code: 'paused' }, turns: 1 });
    expect(parked).toEqual(await run(0));
  });

  it('is parked again when woken by a pause while its model call still waits, and replies paused on its reply', async () => {
    const { clock, actors, calls, step } = await hostedStep();
    clock.advance(PARK_AFTER_MS);
    step.pause?.();
    await vi.waitFor(() => expect(step.parked).toBe(false));
    expect(actors.size).toBe(1);
    clock.advance(PARK_AFTER_MS - 1);
    expect(actors.size).toBe(1);
    clock.advance(1);
    expect(actors.size).toBe(0);
    expect(step.parked).toBe(true);
    // Paused, its time limits no longer count: nothing but the call wakes it.
    expect(clock.pending()).toEqual([]);
    calls[0]?.answer(writeHello);
    expect(await step.reply).toMatchObject({ ok: false, error: { code: 'paused' }, turns: 1 });
    expect(calls).toHaveLength(1);
  });

  it('wakes an actor whose input is only what it is woken with, the parked context once, not a copy of it beside', async () => {
    const { clock, actors, calls, step } = await hostedStep();
    const inputs: AgentActorInput[] = [];
    const spawn = actors.spawn.bind(actors);
    actors.spawn = (id, input, listen) => {
      inputs.push(input);
      return spawn(id, input, listen);
    };
    clock.advance(PARK_AFTER_MS);
    calls[0]?.answer({ content: 'Done' });
    expect(await step.reply).toMatchObject({ ok: true, output: 'Done' });
    expect(inputs).toHaveLength(1);
    expect(Object.keys(inputs[0] ?? {})).toEqual(['woken']);
  });

  it('stays parked when told something, and its agent reads it before its next model call', async () => {
    const { clock, actors, calls, step } = await hostedStep();
    clock.advance(PARK_AFTER_MS);
    step.tell?.({ id: 'm-1', text: 'use British spelling', by: 'ana', at: '2026-01-01T00:00:00Z' });
    expect(actors.size).toBe(0);
    calls[0]?.answer(writeHello);
    await vi.waitFor(() => expect(calls).toHaveLength(2));
    expect(calls[1]?.request.messages.at(-1)).toMatchObject({
      role: 'user',
      content: expect.stringContaining('use British spelling'),
    });
    calls[1]?.answer({ content: 'Wrote notes/hello.md' });
    expect(await step.reply).toMatchObject({ ok: true, toldRead: ['m-1'] });
  });

  it('is woken right after, not crashed, when stopped from inside its group’s own transition', async () => {
    const { clock, actors, calls, step } = await hostedStep();
    clock.advance(PARK_AFTER_MS);
    // Another step of the same group, whose start (heard at once, as an in-process bus may) stops this one.
    let other = 0;
    while (groupOf(`other-${other}`) !== groupOf('task-1.code.1')) other++;
    actors.spawn(`other-${other}`, waitingForever(`other-${other}`), () => step.stop({ why: 'aborted' }));
    expect(await step.reply).toMatchObject({ ok: false, error: { code: 'aborted' } });
    expect(calls[0]?.request.signal?.aborted).toBe(true);
  });

  it('when paused from inside its group’s own transition while parked, lets its model call go on, as it does awake', async () => {
    const run = async (parkAfterMs: number) => {
      const { clock, actors, calls, events, step } = await hostedStep(codeStep(), parkAfterMs);
      clock.advance(6_000);
      let other = 0;
      while (groupOf(`other-${other}`) !== groupOf('task-1.code.1')) other++;
      actors.spawn(`other-${other}`, waitingForever(`other-${other}`), () => step.pause?.());
      await new Promise((resolve) => setImmediate(resolve));
      const aborted = calls[0]?.request.signal?.aborted;
      calls[0]?.answer(writeHello);
      return { reply: await step.reply, events: announced(events), calls: calls.length, aborted };
    };
    const parked = await run(PARK_AFTER_MS);
    expect(parked).toMatchObject({ reply: { ok: false, error: { code: 'paused' } }, aborted: false });
    expect(parked).toEqual(await run(0));
  });
});

/** `n` steps on one host's actors and a simulated clock, each waiting on its model call. */
async function crowdOfSteps(n: number, parkAfterMs = PARK_AFTER_MS) {
  const clock = new SimulatedClock();
  const actors = new StepActors(clock);
  const { model, calls } = heldModel();
  const { deps } = await stepDeps({ clock, events: new EventFactory(clock), actors, parkAfterMs });
  const steps = Array.from({ length: n }, (_, i) =>
    startAgentStep(coder(model), codeStep({ stepId: `task-${i}.code.1`, taskId: `task-${i}` }), deps),
  );
  await vi.waitFor(() => expect(calls).toHaveLength(n));
  const parked = () => steps.filter((step) => step.parked).length;
  return { clock, actors, calls, steps, parked };
}

describe('a crowd of steps waiting on their model (more than CROWD on one host)', () => {
  it('parks a step whose call has waited CROWD_MIN_WAIT_MS when more than CROWD wait, keeping CROWD awake', async () => {
    const { clock, actors, parked } = await crowdOfSteps(CROWD + 1);
    expect(actors.waitingOnModel).toBe(CROWD + 1);
    clock.advance(CROWD_MIN_WAIT_MS - 1);
    expect(parked()).toBe(0);
    clock.advance(1);
    expect(parked()).toBe(1);
    expect(actors.waitingOnModel).toBe(CROWD);
    expect(actors.size).toBe(CROWD);
    // The rest wait out parkAfterMs, as steps do when there is no crowd.
    clock.advance(PARK_AFTER_MS - CROWD_MIN_WAIT_MS - 1);
    expect(parked()).toBe(1);
    clock.advance(1);
    expect(parked()).toBe(CROWD + 1);
    expect(actors.waitingOnModel).toBe(0);
  });

  it('parks none of CROWD steps waiting before parkAfterMs', async () => {
    const { clock, actors, parked } = await crowdOfSteps(CROWD);
    clock.advance(PARK_AFTER_MS - 1);
    expect(parked()).toBe(0);
    expect(actors.size).toBe(CROWD);
    clock.advance(1);
    expect(parked()).toBe(CROWD);
  });

  it('parks every step at a parkAfterMs shorter than CROWD_MIN_WAIT_MS, crowd or not', async () => {
    const { clock, parked } = await crowdOfSteps(CROWD + 1, CROWD_MIN_WAIT_MS / 2);
    clock.advance(CROWD_MIN_WAIT_MS / 2 - 1);
    expect(parked()).toBe(0);
    clock.advance(1);
    expect(parked()).toBe(CROWD + 1);
  });

  it('parks none, crowd or not, when parking is off (parkAfterMs 0)', async () => {
    const { clock, actors, parked } = await crowdOfSteps(CROWD + 1, 0);
    clock.advance(60_000);
    expect(parked()).toBe(0);
    expect(actors.size).toBe(CROWD + 1);
  });

  it('counts a woken step whose call still waits again, and parks it at CROWD_MIN_WAIT_MS while the crowd lasts', async () => {
    const { clock, actors, steps } = await crowdOfSteps(CROWD + 2);
    clock.advance(CROWD_MIN_WAIT_MS);
    expect(actors.waitingOnModel).toBe(CROWD);
    const step = steps.find((each) => each.parked);
    // Woken by a pause while its call still waits, it is one of the crowd again, which is over CROWD.
    step?.pause?.();
    await vi.waitFor(() => expect(step?.parked).toBe(false));
    expect(actors.waitingOnModel).toBe(CROWD + 1);
    clock.advance(CROWD_MIN_WAIT_MS);
    expect(step?.parked).toBe(true);
  });

  it('leaves no step counted once every step has ended: by its reply, its failure, a stop or its host’s stop', async () => {
    const { clock, actors, calls, steps } = await crowdOfSteps(CROWD + 4);
    clock.advance(CROWD_MIN_WAIT_MS);
    expect(actors.waitingOnModel).toBe(CROWD);
    calls[0]?.answer({ content: 'Done' });
    calls[1]?.fail(Object.assign(new Error('overloaded'), { code: 'model_overloaded' }));
    steps[2]?.stop({ why: 'aborted' });
    steps[3]?.stop({ why: 'aborted' });
    await Promise.all(steps.slice(0, 4).map((step) => step.reply));
    expect(actors.waitingOnModel).toBe(CROWD);
    actors.stop();
    const replies = await Promise.all(steps.map((step) => step.reply));
    expect(replies.slice(4).every((reply) => !reply.ok && reply.error.code === 'worker_stopped')).toBe(true);
    expect(actors.waitingOnModel).toBe(0);
  });
});

/** A step's actor input whose model never answers. */
const waitingForever = (stepId: string): AgentMachineInput => ({
  agent: 'other',
  stepId,
  messages: [{ role: 'user', content: 'wait' }],
  tools: [],
  maxTurns: 1,
  expect: 'text',
  services: {
    callModel: () => new Promise(() => {}),
    runTools: () => new Promise(() => {}),
    compactConversation: () => new Promise(() => {}),
  },
});
