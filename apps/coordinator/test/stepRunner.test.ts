import type { StepActivity } from '@troupe/protocol';
import {
  type AgentStepReply,
  AgentStepRequest,
  type StepErrorCode,
  type StepHeartbeat,
  subjects,
  type UsageTotals,
} from '@troupe/protocol';
import { type Delivery, every, TransportError } from '@troupe/runtime';
import { MemoryBus, SimulatedClock } from '@troupe/testkit';
import { describe, expect, it } from 'vitest';
import { createStepRunner } from '../src/workflow/stepRunner.ts';
import type { StepRunOutput } from '../src/workflow/workflowTypes.ts';
import { timePasser } from './support/passTime.ts';

const usage: UsageTotals = { inputTokens: 1, outputTokens: 1, cachedTokens: 0, costUsd: 0, modelCalls: 1 };
const HEARTBEAT_MS = 1_000;

function stepRequest(overrides: Partial<AgentStepRequest> = {}): AgentStepRequest {
  return {
    stepId: 'task-1.write.1',
    taskId: 'task-1',
    pipeline: 'p',
    agent: 'writer',
    step: 'write',
    round: 1,
    goal: 'write it',
    context: [],
    expect: 'text',
    ...overrides,
  };
}

const okReply = (stepId: string, output = 'done'): AgentStepReply => ({
  ok: true,
  stepId,
  output,
  usage,
  turns: 1,
});
const failedReply = (stepId: string, code: StepErrorCode, message: string = code): AgentStepReply => ({
  ok: false,
  stepId,
  error: { code, message },
  usage,
  turns: 0,
});

/**
 * A step runner on an in-memory bus and a simulated clock, and a way to let test time pass: the clock moves in
 * small steps, and the messages and promises each step sets off settle before the next.
 */
function setUp(options: { noResponderWaitMs?: number } = {}) {
  const clock = new SimulatedClock();
  const bus = new MemoryBus({ clock });
  const activity: StepActivity[] = [];
  const runStep = createStepRunner({
    bus,
    clock,
    heartbeatMs: HEARTBEAT_MS,
    noResponderWaitMs: options.noResponderWaitMs ?? 30_000,
    onActivity: (_taskId, change) => activity.push(change),
  });
  const run = (
    request = stepRequest(),
    timeoutMs = 60_000,
    signal = new AbortController().signal,
    firstDelivery = false,
  ) => {
    let outcome: { value?: StepRunOutput; error?: unknown } | undefined;
    const done = runStep({ request, timeoutMs, firstDelivery }, signal).then(
      (value) => (outcome = { value }),
      (error: unknown) => (outcome = { error }),
    );
    return { done, settled: () => outcome };
  };
  const pass = timePasser(bus, clock);
  /** A worker for the agent: `onStep` decides what to do with each step request it gets. */
  const worker = (onStep: (delivery: Delivery<AgentStepRequest>) => void) => {
    const received: AgentStepRequest[] = [];
    const subscription = bus.subscribe(
      subjects.agent('p', 'writer'),
      AgentStepRequest,
      (delivery) => {
        received.push(delivery.value);
        onStep(delivery);
      },
      { queue: 'writer' },
    );
    return { received, subscription };
  };
  const heartbeat = (delivery: Delivery<AgentStepRequest>, extra: Partial<StepHeartbeat> = {}) =>
    bus.publish(delivery.reply as string, { stepId: delivery.value.stepId, heartbeat: true, ...extra });
  return { clock, bus, activity, run, pass, worker, heartbeat };
}

describe('the step call', () => {
  it('returns the reply with its duration in clock time, telling of the agent at work on its first heartbeat', async () => {
    const { run, pass, worker, heartbeat, activity } = setUp();
    let answer: (() => void) | undefined;
    worker((delivery) => {
      heartbeat(delivery);
      answer = () => delivery.respond(okReply(delivery.value.stepId, 'written'));
    });
    const step = run();
    await pass(1_500);
    expect(step.settled()).toBeUndefined();
    answer?.();
    await step.done;
    expect(step.settled()?.value).toMatchObject({ ok: true, output: 'written', durationMs: 1_500 });
    expect(activity.map((a) => a.kind)).toEqual(['agent']);
  });

  it('sends the request with what is left of its time and the heartbeat interval', async () => {
    const { run, pass, worker } = setUp();
    const { received } = worker((delivery) => delivery.respond(okReply(delivery.value.stepId)));
    const step = run(stepRequest(), 30_000);
    await pass(0);
    await step.done;
    expect(received[0]).toMatchObject({
      stepId: 'task-1.write.1',
      timeoutMs: 30_000,
      heartbeatMs: HEARTBEAT_MS,
    });
  });

  it('waits while no worker serves the agent, says so once, then sends the step to the first that comes', async () => {
    const { run, pass, worker, activity } = setUp();
    const step = run();
    await pass(5_000);
    expect(step.settled()).toBeUndefined();
    expect(activity.map((a) => a.kind)).toEqual(['worker']);
    const { received } = worker((delivery) => delivery.respond(okReply(delivery.value.stepId)));
    await pass(3_000);
    expect(step.settled()?.value).toMatchObject({ ok: true });
    expect(received).toHaveLength(1);
  });

  it('gives up when no worker comes within the wait, naming the subject and how to start one', async () => {
    const { run, pass } = setUp({ noResponderWaitMs: 4_000 });
    const step = run();
    await pass(6_000);
    const error = step.settled()?.error;
    expect(TransportError.is(error, 'no_responders')).toBe(true);
    expect((error as Error).message).toContain(subjects.agent('p', 'writer'));
    expect((error as Error).message).toContain('troupe worker');
  });

  it('sends the step, same id, to another worker when its worker goes silent for three heartbeats', async () => {
    const { run, pass, worker, heartbeat } = setUp();
    // The first worker takes the step, beats once, and dies; the second answers.
    const first = worker((delivery) => heartbeat(delivery));
    const second = worker((delivery) => delivery.respond(okReply(delivery.value.stepId, 'from the second')));
    const step = run();
    await pass(2 * HEARTBEAT_MS);
    expect(step.settled()).toBeUndefined();
    await pass(2 * HEARTBEAT_MS);
    expect(step.settled()?.value).toMatchObject({ ok: true, output: 'from the second' });
    expect(first.received.map((r) => r.stepId)).toEqual(['task-1.write.1']);
    expect(second.received.map((r) => r.stepId)).toEqual(['task-1.write.1']);
  });

  it('marks the first send of a step of a first delivery fresh, and no resend', async () => {
    const { run, pass, worker, heartbeat } = setUp();
    let sends = 0;
    const { received } = worker((delivery) => {
      sends++;
      // The first worker beats once and dies; the step goes again.
      if (sends === 1) heartbeat(delivery);
      else delivery.respond(okReply(delivery.value.stepId));
    });
    const step = run(stepRequest(), 60_000, new AbortController().signal, true);
    await pass(4 * HEARTBEAT_MS);
    expect(step.settled()?.value).toMatchObject({ ok: true });
    expect(received.map((r) => r.fresh)).toEqual([true, undefined]);

    const later = setUp();
    const { received: resumed } = later.worker((delivery) =>
      delivery.respond(okReply(delivery.value.stepId)),
    );
    const again = later.run(stepRequest(), 60_000, new AbortController().signal, false);
    await later.pass(0);
    await again.done;
    expect(resumed[0]?.fresh).toBeUndefined();
  });

  it('fails with step_timeout at its time and the reply grace, without a reply', async () => {
    const { clock, run, pass, worker, heartbeat } = setUp();
    worker((delivery) => {
      heartbeat(delivery);
      every(clock, HEARTBEAT_MS, () => heartbeat(delivery));
    });
    const step = run(stepRequest(), 5_000);
    await pass(6_900);
    expect(step.settled()).toBeUndefined();
    await pass(200);
    const error = step.settled()?.error;
    expect(TransportError.is(error, 'step_timeout')).toBe(true);
    expect((error as Error).message).toContain('agent writer did not finish within the step timeout (5 s)');
  });

  it('fails with approval_timeout, naming the request, when the last heartbeat said a person was asked', async () => {
    const { clock, run, pass, worker, heartbeat, activity } = setUp();
    const waitingFor = { kind: 'approval' as const, id: 'ap-123' };
    worker((delivery) => {
      heartbeat(delivery, { waitingFor });
      every(clock, HEARTBEAT_MS, () => heartbeat(delivery, { waitingFor }));
    });
    const step = run(stepRequest(), 5_000);
    await pass(8_000);
    const error = step.settled()?.error;
    expect(TransportError.is(error, 'approval_timeout')).toBe(true);
    expect((error as Error).message).toContain('ap-123');
    expect(activity).toEqual([expect.objectContaining({ kind: 'person', request: waitingFor })]);
  });

  it('tells of a model wait from the heartbeats, and of the agent at work again after it', async () => {
    const { run, pass, worker, heartbeat, activity } = setUp();
    let delivered: Delivery<AgentStepRequest> | undefined;
    worker((delivery) => {
      delivered = delivery;
      heartbeat(delivery, { waitingOnModel: true });
    });
    const step = run();
    await pass(500);
    heartbeat(delivered as Delivery<AgentStepRequest>);
    await pass(500);
    delivered?.respond(okReply('task-1.write.1'));
    await step.done;
    expect(activity.map((a) => a.kind)).toEqual(['model', 'agent']);
  });

  it('sends the step again after a reconnect, since a reply in flight then may be lost', async () => {
    const { bus, run, pass, worker, heartbeat } = setUp();
    const deliveries: Delivery<AgentStepRequest>[] = [];
    const { received } = worker((delivery) => {
      deliveries.push(delivery);
      heartbeat(delivery);
    });
    const step = run();
    await pass(200);
    bus.emitStatus('reconnect');
    await pass(200);
    expect(received).toHaveLength(2);
    deliveries[1]?.respond(okReply('task-1.write.1', 'after the reconnect'));
    await pass(0);
    expect(step.settled()?.value).toMatchObject({ output: 'after the reconnect' });
  });

  it('sends the step again, backing off, when the host could not reach its journal', async () => {
    const { run, pass, worker } = setUp();
    let attempts = 0;
    worker((delivery) => {
      attempts++;
      delivery.respond(
        attempts === 1
          ? failedReply(delivery.value.stepId, 'journal_unavailable', 'journal out of reach')
          : okReply(delivery.value.stepId, 'second time'),
      );
    });
    const step = run();
    await pass(100);
    expect(attempts).toBe(1);
    await pass(300);
    expect(step.settled()?.value).toMatchObject({ ok: true, output: 'second time' });
    expect(attempts).toBe(2);
  });

  it('sends the step to another worker when its worker stopped mid-step, as while no worker served it', async () => {
    const { run, pass, worker, activity } = setUp();
    let attempts = 0;
    worker((delivery) => {
      attempts++;
      delivery.respond(
        attempts < 4
          ? failedReply(delivery.value.stepId, 'worker_stopped')
          : okReply(delivery.value.stepId, 'taken over'),
      );
    });
    const step = run();
    await pass(3_000);
    expect(step.settled()?.value).toMatchObject({ ok: true, output: 'taken over' });
    expect(attempts).toBe(4);
    expect(activity.map((a) => a.kind)).toContain('worker');
  });

  it('fails with invalid_reply when the answer is neither a reply nor a heartbeat', async () => {
    const { run, pass, worker } = setUp();
    worker((delivery) => delivery.respond({ something: 'else' }));
    const step = run();
    await pass(0);
    expect(TransportError.is(step.settled()?.error, 'invalid_reply')).toBe(true);
  });

  it('returns a step failure of the agent as its reply, not as an error', async () => {
    const { run, pass, worker } = setUp();
    worker((delivery) => delivery.respond(failedReply(delivery.value.stepId, 'budget_exceeded')));
    const step = run();
    await pass(0);
    expect(step.settled()?.value).toMatchObject({ ok: false, error: { code: 'budget_exceeded' } });
  });

  it('stops waiting when its signal aborts', async () => {
    const { run, pass, worker, heartbeat } = setUp();
    worker((delivery) => heartbeat(delivery));
    const abort = new AbortController();
    const step = run(stepRequest(), 60_000, abort.signal);
    await pass(100);
    abort.abort();
    await pass(0);
    expect(TransportError.is(step.settled()?.error, 'aborted')).toBe(true);
  });
});
