import type { StepActivity } from '@troupe/protocol';
import { type AgentStepReply, AgentStepRequest, subjects, type UsageTotals } from '@troupe/protocol';
import { type Delivery, every, type LocalSteps, TransportError } from '@troupe/runtime';
import { MemoryBus, SimulatedClock } from '@troupe/testkit';
import { describe, expect, it } from 'vitest';
import { type Actor, assign, createActor, setup } from 'xstate';
import {
  RUN_CONTEXT_ID,
  type RunContextEvent,
  type RunFacts,
  runContextLogic,
} from '../src/task/runContext.ts';
import { createStepCallLogic, type StepCallLogic } from '../src/workflow/stepCall.ts';
import type { StepRunInput, StepRunOutput } from '../src/workflow/workflowTypes.ts';
import { timePasser } from './support/passTime.ts';

const usage: UsageTotals = { inputTokens: 1, outputTokens: 1, cachedTokens: 0, costUsd: 0, modelCalls: 1 };
const HEARTBEAT_MS = 1_000;
const STEP_ID = 'task-1.write.1';
const VERSION = 'a'.repeat(64);

const request: AgentStepRequest = {
  stepId: STEP_ID,
  taskId: 'task-1',
  pipeline: 'p',
  agent: 'writer',
  step: 'write',
  round: 1,
  goal: 'write it',
  context: [],
  expect: 'text',
  traceparent: '00-workflow-trace-01',
};

const okReply = (stepId: string, output = 'done'): AgentStepReply => ({
  ok: true,
  stepId,
  output,
  usage,
  turns: 1,
});

interface TaskContext {
  facts: RunFacts;
  step: StepRunInput;
  heard: StepActivity[];
  /** How the call ended: its reply (`onDone`), or the error it failed with (`onError`). */
  outcome?: Outcome;
}
type Outcome = { reply: StepRunOutput } | { error: unknown };

/**
 * A task-like parent, as the task tree holds a step call: a run context beside a workflow state that invokes the
 * step call as its child, and leaves it on `cancel` (stopping the call).
 */
function taskOf(stepCall: StepCallLogic) {
  return setup({
    types: {
      context: {} as TaskContext,
      input: {} as { facts: RunFacts; step: StepRunInput },
      events: {} as RunContextEvent | { type: 'cancel' },
      output: {} as Outcome | undefined,
    },
    actors: { runContext: runContextLogic, stepCall },
  }).createMachine({
    context: ({ input }) => ({ ...input, heard: [] }),
    invoke: { src: 'runContext', systemId: RUN_CONTEXT_ID, input: ({ context }) => context.facts },
    on: {
      activity: { actions: assign({ heard: ({ context, event }) => [...context.heard, event.activity] }) },
    },
    initial: 'working',
    states: {
      working: {
        invoke: {
          src: 'stepCall',
          input: ({ context }) => context.step,
          onDone: { target: 'done', actions: assign({ outcome: ({ event }) => ({ reply: event.output }) }) },
          onError: { target: 'done', actions: assign({ outcome: ({ event }) => ({ error: event.error }) }) },
        },
        on: { cancel: 'cancelled' },
      },
      done: { type: 'final' },
      cancelled: { type: 'final' },
    },
    output: ({ context }) => context.outcome,
  });
}
type Task = ReturnType<typeof taskOf>;

/** An in-memory bus that counts its connection-status subscriptions, to show a call leaves none behind. */
class CountingBus extends MemoryBus {
  statusListeners = 0;
  override onStatus(listener: Parameters<MemoryBus['onStatus']>[0]): () => void {
    this.statusListeners++;
    const stop = super.onStatus(listener);
    return () => {
      this.statusListeners--;
      stop();
    };
  }
}

/** A step call inside a task on an in-memory bus and a simulated clock, with a worker the test drives. */
function setUp(options: { noResponderWaitMs?: number; local?: LocalSteps } = {}) {
  const clock = new SimulatedClock();
  const bus = new CountingBus({ clock });
  const logic = createStepCallLogic({
    bus,
    clock,
    heartbeatMs: HEARTBEAT_MS,
    waitForWorkersMs: options.noResponderWaitMs ?? 30_000,
    ...(options.local ? { local: options.local } : {}),
  });
  const task = taskOf(logic);
  const facts: RunFacts = {
    taskId: 'task-1',
    firstDelivery: true,
    traceparent: '00-run-span-01',
    version: VERSION,
  };
  const input = (timeoutMs: number) => ({ facts, step: { request, timeoutMs } });
  const start = (timeoutMs = 60_000) => createActor(task, { clock, input: input(timeoutMs) }).start();
  const pass = timePasser(bus, clock);
  const worker = (onStep: (delivery: Delivery<AgentStepRequest>) => void) => {
    const received: AgentStepRequest[] = [];
    const deliveries: Delivery<AgentStepRequest>[] = [];
    const subscription = bus.subscribe(
      subjects.agent('p', 'writer'),
      AgentStepRequest,
      (delivery) => {
        received.push(delivery.value);
        deliveries.push(delivery);
        onStep(delivery);
      },
      { queue: 'writer' },
    );
    return { received, deliveries, subscription };
  };
  const heartbeat = (delivery: Delivery<AgentStepRequest>) =>
    bus.publish(delivery.reply as string, { stepId: delivery.value.stepId, heartbeat: true });
  const beatEvery = (delivery: Delivery<AgentStepRequest>) => {
    heartbeat(delivery);
    return every(clock, HEARTBEAT_MS, () => heartbeat(delivery));
  };
  /** The task's checkpoint as it would be stored: its persisted snapshot through JSON. */
  const checkpoint = (actor: Actor<Task>) => JSON.parse(JSON.stringify(actor.getPersistedSnapshot()));
  // A restored actor goes on from its snapshot; the input it is given is not read again.
  const restore = (snapshot: unknown) =>
    createActor(task, {
      clock,
      input: input(0),
      snapshot: snapshot as ReturnType<Actor<Task>['getPersistedSnapshot']>,
    }).start();
  return { clock, bus, start, pass, worker, heartbeat, beatEvery, checkpoint, restore };
}

/** A step call's persisted snapshot, as far as the test reads it. */
type StoredCall = { children: Record<string, unknown> };
const outcomeOf = (actor: Actor<Task>) => actor.getSnapshot().output;
/** The error the call failed with, when it did. */
const failureOf = (actor: Actor<Task>): unknown => {
  const outcome = outcomeOf(actor);
  return outcome && 'error' in outcome ? outcome.error : undefined;
};
const stepCallState = (actor: Actor<Task>): unknown => {
  const child = Object.values(actor.getSnapshot().children).find((ref) => ref?.src === 'stepCall');
  const snapshot = child?.getSnapshot();
  return snapshot && 'value' in snapshot ? snapshot.value : undefined;
};

describe('the step call as a child of its task', () => {
  it("sends the step fresh on the first delivery, with the run's trace and version, and ends with the reply", async () => {
    const { start, pass, worker, heartbeat } = setUp();
    const { received, deliveries } = worker((delivery) => heartbeat(delivery));
    const task = start(30_000);
    await pass(1_500);
    expect(outcomeOf(task)).toBeUndefined();
    deliveries[0]?.respond(okReply(STEP_ID, 'written'));
    await pass(0);
    expect(outcomeOf(task)).toEqual({
      reply: expect.objectContaining({ ok: true, output: 'written', durationMs: 1_500 }),
    });
    expect(received).toHaveLength(1);
    expect(received[0]).toMatchObject({
      stepId: STEP_ID,
      fresh: true,
      traceparent: '00-run-span-01',
      version: VERSION,
      timeoutMs: 30_000,
      heartbeatMs: HEARTBEAT_MS,
    });
    // The first heartbeat told the task its agent is at work, through the run context.
    expect(task.getSnapshot().context.heard).toEqual([
      expect.objectContaining({ kind: 'agent', step: 'write', agent: 'writer' }),
    ]);
  });

  it('keeps waiting while the heartbeats come, long past the missed-heartbeat limit', async () => {
    const { start, pass, worker, beatEvery } = setUp();
    const { received } = worker((delivery) => beatEvery(delivery));
    const task = start();
    await pass(20 * HEARTBEAT_MS);
    expect(outcomeOf(task)).toBeUndefined();
    expect(received).toHaveLength(1);
  });

  it('waits while no worker serves the agent, then sends the step to the first that comes', async () => {
    const { start, pass, worker } = setUp();
    const task = start();
    await pass(5_000);
    expect(outcomeOf(task)).toBeUndefined();
    expect(stepCallState(task)).toEqual({ calling: 'waitingForWorker' });
    expect(task.getSnapshot().context.heard.map((a) => a.kind)).toEqual(['worker']);
    const { received } = worker((delivery) => delivery.respond(okReply(STEP_ID)));
    await pass(3_000);
    expect(outcomeOf(task)).toMatchObject({ reply: { ok: true } });
    // Only the first send was fresh; this one followed others.
    expect(received.map((r) => r.fresh)).toEqual([undefined]);
  });

  it('sends the step again, same id, after a reconnect', async () => {
    const { bus, start, pass, worker, heartbeat } = setUp();
    const { received, deliveries } = worker((delivery) => heartbeat(delivery));
    const task = start();
    await pass(200);
    bus.emitStatus('reconnect');
    await pass(200);
    expect(received.map((r) => [r.stepId, r.fresh])).toEqual([
      [STEP_ID, true],
      [STEP_ID, undefined],
    ]);
    deliveries[1]?.respond(okReply(STEP_ID, 'after the reconnect'));
    await pass(0);
    expect(outcomeOf(task)).toMatchObject({ reply: { output: 'after the reconnect' } });
  });

  it('ends with step_timeout at its time and the reply grace, its code kept for the task failure', async () => {
    const { start, pass, worker, beatEvery } = setUp();
    worker((delivery) => beatEvery(delivery));
    const task = start(5_000);
    await pass(6_900);
    expect(outcomeOf(task)).toBeUndefined();
    await pass(200);
    const error = failureOf(task);
    expect(TransportError.is(error, 'step_timeout')).toBe(true);
    expect((error as Error).message).toContain('agent writer did not finish within the step timeout (5 s)');
  });

  it("waits at most until the task's deadline and its grace, and asks the agent to stop by then", async () => {
    const { clock, bus, pass, worker, beatEvery } = setUp();
    const { received } = worker((delivery) => beatEvery(delivery));
    const logic = createStepCallLogic({ bus, clock, heartbeatMs: HEARTBEAT_MS, waitForWorkersMs: 30_000 });
    const facts: RunFacts = { taskId: 'task-1', firstDelivery: false, traceparent: '00-run-span-01' };
    const budgeted = { ...request, budget: { deadline: clock.now() + 10_000, sources: {} } };
    const task = createActor(taskOf(logic), {
      clock,
      input: { facts, step: { request: budgeted, timeoutMs: 60_000 } },
    }).start();
    await pass(0);
    // The deadline plus 5 s for the agent's own account of running out, not the step's 60 s.
    expect(received[0]?.timeoutMs).toBe(15_000);
    await pass(16_900);
    expect(outcomeOf(task)).toBeUndefined();
    await pass(200);
    expect(TransportError.is(failureOf(task), 'step_timeout')).toBe(true);
  });

  it('is stopped with the state that invoked it: the request in flight stops listening and no reconnect sends it', async () => {
    const { bus, start, pass, worker, heartbeat } = setUp();
    const { received, deliveries } = worker((delivery) => heartbeat(delivery));
    const task = start();
    await pass(200);
    const inbox = deliveries[0]?.reply as string;
    expect(bus.hasListener(inbox)).toBe(true);
    task.send({ type: 'cancel' });
    expect(bus.hasListener(inbox)).toBe(false);
    bus.emitStatus('reconnect');
    await pass(10_000);
    expect(received).toHaveLength(1);
    expect(task.getSnapshot().value).toBe('cancelled');
  });

  it('hears reconnects through one listener for all its sends in flight: each is sent again, and the last gone takes it', async () => {
    const { bus, start, pass, worker, heartbeat } = setUp();
    const { received, deliveries } = worker((delivery) => heartbeat(delivery));
    const tasks = [start(), start(), start()];
    await pass(200);
    expect(received).toHaveLength(3);
    expect(bus.statusListeners).toBe(1);
    bus.emitStatus('reconnect');
    await pass(200);
    // Each heard it once: sent again once, and its send again did not hear the reconnect that set it off.
    expect(received.map((r) => r.fresh)).toEqual([true, true, true, undefined, undefined, undefined]);
    expect(bus.statusListeners).toBe(1);
    deliveries[3]?.respond(okReply(STEP_ID, 'first'));
    deliveries[4]?.respond(okReply(STEP_ID, 'second'));
    await pass(0);
    expect(bus.statusListeners).toBe(1);
    tasks[2]?.send({ type: 'cancel' });
    expect(bus.statusListeners).toBe(0);
    expect(tasks.slice(0, 2).map((task) => outcomeOf(task))).toEqual([
      { reply: expect.objectContaining({ output: 'first' }) },
      { reply: expect.objectContaining({ output: 'second' }) },
    ]);
  });

  it('leaves nothing listening once it has ended: replied, failed or stopped', async () => {
    const { bus, start, pass, worker, heartbeat } = setUp();
    const answered = worker((delivery) => delivery.respond(okReply(STEP_ID)));
    const replied = start();
    await pass(0);
    expect(outcomeOf(replied)).toMatchObject({ reply: { ok: true } });
    expect(bus.statusListeners).toBe(0);
    answered.subscription.unsubscribe();

    const { deliveries } = worker((delivery) => heartbeat(delivery));
    const failed = start(2_000);
    await pass(1_000);
    expect(bus.statusListeners).toBe(1);
    await pass(5_000);
    expect(TransportError.is(failureOf(failed), 'step_timeout')).toBe(true);
    expect(bus.statusListeners).toBe(0);
    expect(bus.hasListener(deliveries[0]?.reply as string)).toBe(false);

    const stopped = start();
    await pass(100);
    stopped.send({ type: 'cancel' });
    expect(bus.statusListeners).toBe(0);
  });

  it('listens on one inbox at a time: a send after a reconnect or a silent worker closes the one before', async () => {
    const { bus, start, pass, worker, heartbeat } = setUp();
    // Only the first send is heard from: the second goes silent and is sent again after three heartbeats.
    const { deliveries } = worker((delivery) => deliveries.length === 1 && heartbeat(delivery));
    const task = start();
    const listening = () => deliveries.filter((d) => bus.hasListener(d.reply as string)).length;
    await pass(200);
    bus.emitStatus('reconnect');
    await pass(200);
    expect([deliveries.length, listening()]).toEqual([2, 1]);
    await pass(4 * HEARTBEAT_MS);
    expect(deliveries.length).toBeGreaterThanOrEqual(3);
    expect(listening()).toBe(1);
    task.send({ type: 'cancel' });
    expect(listening()).toBe(0);
    expect(bus.statusListeners).toBe(0);
  });

  it('restored from a checkpoint mid-request, sends the step again under the same id, not fresh, its timeout still from the first send', async () => {
    const { clock, start, pass, worker, beatEvery, checkpoint, restore } = setUp();
    const { received, deliveries } = worker((delivery) => beatEvery(delivery));
    const first = start(30_000);
    await pass(2_000);
    const stored = checkpoint(first);
    // The coordinator dies; the task is resumed from its checkpoint 10 s later.
    first.stop();
    clock.advance(10_000);
    const resumed = restore(stored);
    await pass(0);
    expect(received.map((r) => [r.stepId, r.fresh, r.timeoutMs])).toEqual([
      [STEP_ID, true, 30_000],
      [STEP_ID, undefined, 18_000],
    ]);
    // Unanswered, it times out 30 s (and the reply grace) after its first send, not after the restore.
    await pass(18_000 + 1_900);
    expect(outcomeOf(resumed)).toBeUndefined();
    await pass(200);
    expect(TransportError.is(failureOf(resumed), 'step_timeout')).toBe(true);
    expect(deliveries).toHaveLength(2);
  });

  it('restored from a checkpoint mid-request, ends with the reply to the send it repeats, with the whole duration', async () => {
    const { clock, start, pass, worker, heartbeat, checkpoint, restore } = setUp();
    const { deliveries } = worker((delivery) => heartbeat(delivery));
    const first = start();
    await pass(1_000);
    const stored = checkpoint(first);
    first.stop();
    clock.advance(4_000);
    const resumed = restore(stored);
    await pass(0);
    deliveries[1]?.respond(okReply(STEP_ID, 'from the journal'));
    await pass(0);
    expect(outcomeOf(resumed)).toMatchObject({ reply: { output: 'from the journal', durationMs: 5_000 } });
  });

  /** Agent hosts of this process that take a step only while the test gives them room; what they took is kept. */
  const localHosts = () => {
    const taken: { request: AgentStepRequest; answer: (reply: AgentStepReply) => void; left: boolean }[] = [];
    const hosts = { room: false, taken, local: {} as LocalSteps };
    hosts.local = {
      tryTake(request) {
        if (!hosts.room) return undefined;
        let answer: (reply: AgentStepReply) => void = () => {};
        const reply = new Promise<AgentStepReply>((resolve) => (answer = resolve));
        const entry = { request, answer, left: false };
        taken.push(entry);
        return { reply, cancel: () => (entry.left = true) };
      },
    };
    return hosts;
  };

  it('restored from a checkpoint mid-request sent over NATS, may send the step again to a host of this process, under the same id, not fresh', async () => {
    const hosts = localHosts();
    const { clock, start, pass, worker, heartbeat, checkpoint, restore } = setUp({ local: hosts.local });
    const { received } = worker((delivery) => heartbeat(delivery));
    const first = start(30_000);
    await pass(1_000);
    expect(received.map((r) => [r.stepId, r.fresh])).toEqual([[STEP_ID, true]]);
    const stored = checkpoint(first);
    first.stop();
    clock.advance(4_000);
    hosts.room = true;
    const resumed = restore(stored);
    await pass(0);
    expect(received).toHaveLength(1);
    expect(hosts.taken.map(({ request }) => [request.stepId, request.fresh, request.timeoutMs])).toEqual([
      [STEP_ID, undefined, 25_000],
    ]);
    hosts.taken[0]?.answer(okReply(STEP_ID, 'from the journal'));
    await pass(0);
    expect(outcomeOf(resumed)).toMatchObject({ reply: { output: 'from the journal', durationMs: 5_000 } });
  });

  it('restored from a checkpoint mid-request taken in this process, sends the step again over NATS when no host here has room, under the same id, not fresh', async () => {
    const hosts = localHosts();
    hosts.room = true;
    const { clock, start, pass, worker, heartbeat, checkpoint, restore } = setUp({ local: hosts.local });
    const { received, deliveries } = worker((delivery) => heartbeat(delivery));
    const first = start(30_000);
    await pass(1_000);
    expect(hosts.taken.map(({ request }) => [request.stepId, request.fresh])).toEqual([[STEP_ID, true]]);
    const stored = checkpoint(first);
    first.stop();
    // The workflow that left the step left its run here too.
    expect(hosts.taken[0]?.left).toBe(true);
    clock.advance(4_000);
    hosts.room = false;
    const resumed = restore(stored);
    await pass(0);
    expect(received.map((r) => [r.stepId, r.fresh, r.timeoutMs])).toEqual([[STEP_ID, undefined, 25_000]]);
    deliveries[0]?.respond(okReply(STEP_ID, 'from the journal'));
    await pass(0);
    expect(outcomeOf(resumed)).toMatchObject({ reply: { output: 'from the journal', durationMs: 5_000 } });
  });

  it('holds the request in flight once in a checkpoint, and restored sends it whole again', async () => {
    const { clock, start, pass, worker, heartbeat, checkpoint, restore } = setUp();
    const { received } = worker((delivery) => heartbeat(delivery));
    const first = start();
    await pass(100);
    const stored = checkpoint(first);
    // The request is in the step call's context only, not again in the input of its send.
    const call = Object.values(stored.children as Record<string, { src: string; snapshot: unknown }>).find(
      (child) => child.src === 'stepCall',
    );
    expect(JSON.stringify(call?.snapshot).split(request.goal)).toHaveLength(2);
    first.stop();
    clock.advance(1_000);
    restore(stored);
    await pass(0);
    const { timeoutMs: _first, sentAt: firstSentAt, ...sent } = received[0] as AgentStepRequest;
    const { timeoutMs: _again, sentAt: sentAgainAt, ...resent } = received[1] as AgentStepRequest;
    expect(resent).toEqual({ ...sent, fresh: undefined });
    // Each send says when it went, so a host compares the task's steering it heard with that send's time.
    expect((sentAgainAt ?? 0) - (firstSentAt ?? 0)).toBe(1_100);
  });

  it('restored from a checkpoint whose call still had its connection child, drops that child and still hears reconnects', async () => {
    const { clock, bus, start, pass, worker, heartbeat, checkpoint, restore } = setUp();
    const { deliveries } = worker((delivery) => heartbeat(delivery));
    const first = start();
    await pass(100);
    const stored = checkpoint(first);
    // As a checkpoint of before the send heard reconnects itself: a `connection` child beside the send.
    const call = Object.values(stored.children as Record<string, { src: string; snapshot: StoredCall }>).find(
      (child) => child.src === 'stepCall',
    );
    const children = call?.snapshot.children as Record<string, unknown>;
    children['0.stepCall.calling'] = {
      snapshot: { status: 'active', output: undefined, error: undefined },
      src: 'connection',
      syncSnapshot: false,
    };
    first.stop();
    clock.advance(1_000);
    const resumed = restore(stored);
    await pass(0);
    expect(deliveries).toHaveLength(2);
    // One child, the send, which also hears the reconnects: a parked task keeps no actor for them.
    const restoredCall = Object.values(resumed.getSnapshot().children).find((ref) => ref?.src === 'stepCall');
    const restoredChildren = (restoredCall?.getSnapshot() as StoredCall | undefined)?.children ?? {};
    expect(Object.keys(restoredChildren)).toHaveLength(1);
    expect(bus.statusListeners).toBe(1);
    bus.emitStatus('reconnect');
    await pass(0);
    expect(deliveries).toHaveLength(3);
    deliveries[2]?.respond(okReply(STEP_ID, 'after the reconnect'));
    await pass(0);
    expect(outcomeOf(resumed)).toMatchObject({ reply: { output: 'after the reconnect' } });
    expect(bus.statusListeners).toBe(0);
  });

  it('restored past its timeout, ends with step_timeout at once and sends nothing', async () => {
    const { clock, start, pass, worker, heartbeat, checkpoint, restore } = setUp();
    const { received } = worker((delivery) => heartbeat(delivery));
    const first = start(5_000);
    await pass(1_000);
    const stored = checkpoint(first);
    first.stop();
    clock.advance(60_000);
    const resumed = restore(stored);
    await pass(0);
    expect(received).toHaveLength(1);
    expect(TransportError.is(failureOf(resumed), 'step_timeout')).toBe(true);
  });

  it('restored while waiting for a worker, sends again once its backoff is over', async () => {
    const { start, pass, worker, checkpoint, restore } = setUp();
    const first = start();
    await pass(100);
    expect(stepCallState(first)).toEqual({ calling: 'waitingForWorker' });
    const stored = checkpoint(first);
    first.stop();
    const resumed = restore(stored);
    const { received } = worker((delivery) => delivery.respond(okReply(STEP_ID)));
    await pass(2_000);
    expect(received).toHaveLength(1);
    expect(outcomeOf(resumed)).toMatchObject({ reply: { ok: true } });
  });

  it('restored from a checkpoint of before the upgrade, where the step was a promise, starts the step afresh from its input', async () => {
    const { start, pass, worker, heartbeat, checkpoint, restore } = setUp();
    const { received, deliveries } = worker((delivery) => heartbeat(delivery));
    const first = start(30_000);
    await pass(100);
    const stored = checkpoint(first);
    first.stop();
    // What the promise actor of the old `runStep` persisted: its input, and no state value.
    const id = Object.keys(stored.children).find((key) => stored.children[key].src === 'stepCall') as string;
    stored.children[id].snapshot = { status: 'active', input: { request, timeoutMs: 30_000 } };
    const resumed = restore(stored);
    await pass(0);
    expect(stepCallState(resumed)).toEqual({ calling: 'sent' });
    expect(received.map((r) => [r.stepId, r.fresh, r.timeoutMs])).toEqual([
      [STEP_ID, true, 30_000],
      [STEP_ID, undefined, 30_000],
    ]);
    deliveries[1]?.respond(okReply(STEP_ID, 'resumed'));
    await pass(0);
    expect(outcomeOf(resumed)).toMatchObject({ reply: { output: 'resumed' } });
  });
});
