import { DecisionReceipt, type HumanRequest, subjects, type TroupeEvent } from '@troupe/protocol';
import { MemoryBus, MemoryKv, SimulatedClock } from '@troupe/testkit';
import { describe, expect, it } from 'vitest';
import { NatsHumanGate } from '../../src/approvals/humanGate.ts';
import { TaskEndedError } from '../../src/approvals/taskEnded.ts';
import { underPrefix } from '../../src/durable/kvStore.ts';
import { EventFactory } from '../../src/events/eventFactory.ts';
import { createLogger } from '../../src/logging/logger.ts';

const TIMEOUT_MS = 60_000;
const scope = {
  pipeline: 'p',
  taskId: 'task-1',
  traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
  agent: 'executor',
  stepId: 'task-1.build.1',
};
const ask = {
  callId: 'call-1',
  index: 0,
  tool: 'write_file',
  arguments: '{"path":"a.txt"}',
  reason: 'writes a file',
};

/** A human gate on an in-memory bus and KV bucket (another process's, when given) and a simulated clock. */
function setUp(
  bucket = new MemoryKv<HumanRequest>(),
  makeBus = (clock: SimulatedClock) => new MemoryBus({ clock }),
) {
  const clock = new SimulatedClock();
  const bus = makeBus(clock);
  const gate = new NatsHumanGate({
    bus,
    store: bucket,
    events: new EventFactory(clock),
    clock,
    logger: createLogger({ level: 'silent' }),
    timeoutMs: TIMEOUT_MS,
  });
  /** The id of the request the step waits on, once it has been announced. */
  const pendingId = async (): Promise<string> => {
    await expect.poll(() => gate.waitingOn(scope.stepId)).toBeDefined();
    await bus.settled();
    return gate.waitingOn(scope.stepId)?.id as string;
  };
  const decide = (id: string, payload: unknown, timeoutMs = 1_000) =>
    bus.request(subjects.approval(scope.pipeline, scope.taskId, id), payload, DecisionReceipt, { timeoutMs });
  // The pipeline's requests: records are kept under `<pipeline>.<id>`.
  const store = underPrefix(bucket, scope.pipeline);
  return { clock, bus, bucket, store, gate, pendingId, decide };
}

describe('the human gate', () => {
  it('records the request as pending, announces it, and resolves with the decision that arrives', async () => {
    const { clock, bus, bucket, store, gate, pendingId, decide } = setUp();
    const decision = gate.approve(ask, scope, new AbortController().signal);
    const id = await pendingId();
    // Kept by pipeline, where the broker can limit who reads and writes it.
    expect(await bucket.keys()).toEqual([`p.${id}`]);
    expect((await store.get(id))?.value).toMatchObject({
      kind: 'approval',
      status: 'pending',
      tool: 'write_file',
      expiresAt: new Date(clock.now() + TIMEOUT_MS).toISOString(),
    });
    expect(bus.eventsOf('approval.requested')[0]?.data).toMatchObject({ approvalId: id, tool: 'write_file' });

    await expect(decide(id, { decision: 'allow', reason: 'fine', by: 'ana' })).resolves.toEqual({
      ok: true,
      id,
      outcome: 'allow',
    });
    await expect(decision).resolves.toEqual({ decision: 'allow', reason: 'fine', by: 'ana' });
    expect((await store.get(id))?.value).toMatchObject({ status: 'allowed', by: 'ana', reason: 'fine' });
    expect(bus.eventsOf('approval.decided')[0]?.data).toMatchObject({
      approvalId: id,
      decision: 'allow',
      by: 'ana',
    });
    expect(gate.waitingOn(scope.stepId)).toBeUndefined();
  });

  it('takes one decision: a second finds nobody waiting', async () => {
    const { gate, pendingId, decide } = setUp();
    const decision = gate.approve(ask, scope, new AbortController().signal);
    const id = await pendingId();
    await decide(id, { decision: 'deny', by: 'ana' });
    await expect(decide(id, { decision: 'allow', by: 'bo' })).rejects.toMatchObject({
      code: 'no_responders',
    });
    await expect(decision).resolves.toMatchObject({ decision: 'deny', by: 'ana' });
  });

  it('answers a decision that is not one with invalid_message, and goes on waiting', async () => {
    const { gate, pendingId, decide } = setUp();
    const decision = gate.approve(ask, scope, new AbortController().signal);
    const id = await pendingId();
    await expect(decide(id, { decision: 'maybe' })).rejects.toMatchObject({ code: 'invalid_message' });
    await decide(id, { decision: 'allow' });
    await expect(decision).resolves.toMatchObject({ decision: 'allow' });
  });

  it('denies by default when nobody decides in time, on the clock, and records the request as expired', async () => {
    const { clock, bus, store, gate, pendingId } = setUp();
    const decision = gate.approve(ask, scope, new AbortController().signal);
    const id = await pendingId();
    clock.advance(TIMEOUT_MS - 1);
    await bus.settled();
    expect(gate.waitingOn(scope.stepId)).toBeDefined();
    clock.advance(1);
    await expect(decision).resolves.toMatchObject({ decision: 'deny', by: 'timeout' });
    expect((await store.get(id))?.value.status).toBe('expired');
    expect(bus.eventsOf('approval.decided')[0]?.data).toMatchObject({ expired: true, decision: 'deny' });
  });

  it('takes a decision written to KV while it waits (as `troupe approve` does when no process answers)', async () => {
    const { store, gate, pendingId } = setUp();
    const decision = gate.approve(ask, scope, new AbortController().signal);
    const id = await pendingId();
    const entry = await store.get(id);
    await store.update(
      id,
      { ...(entry?.value as HumanRequest), status: 'denied', by: 'ops' },
      entry?.revision ?? 0,
    );
    await expect(decision).resolves.toMatchObject({ decision: 'deny', by: 'ops' });
  });

  it('answers already_decided to a reply that loses to a decision written to KV meanwhile; that one stands', async () => {
    const { bucket, store, gate, pendingId, decide } = setUp();
    // `troupe approve` writes its decision just before the reply's own write lands.
    const update = bucket.update.bind(bucket);
    let raced = false;
    bucket.update = async (key, value, revision) => {
      if (!raced) {
        raced = true;
        const entry = await bucket.get(key);
        await update(key, { ...(entry?.value as HumanRequest), status: 'denied', by: 'ops' }, revision);
      }
      return update(key, value, revision);
    };
    const decision = gate.approve(ask, scope, new AbortController().signal);
    const id = await pendingId();
    await expect(decide(id, { decision: 'allow', by: 'ana' })).rejects.toMatchObject({
      code: 'already_decided',
    });
    await expect(decision).resolves.toMatchObject({ decision: 'deny', by: 'ops' });
    expect((await store.get(id))?.value).toMatchObject({ status: 'denied', by: 'ops' });
  });

  it('lets a decision being written when the deadline passes stand: the agent, the record and the receipt agree', async () => {
    const { clock, bucket, store, gate, pendingId, decide } = setUp();
    const update = bucket.update.bind(bucket);
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    let writing = false;
    bucket.update = async (key, value, revision) => {
      writing = true;
      await held;
      return update(key, value, revision);
    };
    const decision = gate.approve(ask, scope, new AbortController().signal);
    const id = await pendingId();
    // The person waits longer than the request's deadline, which passes while the decision is written.
    const receipt = decide(id, { decision: 'allow', by: 'ana' }, 2 * TIMEOUT_MS);
    await expect.poll(() => writing).toBe(true);
    clock.advance(TIMEOUT_MS);
    release();
    await expect(receipt).resolves.toMatchObject({ outcome: 'allow' });
    await expect(decision).resolves.toMatchObject({ decision: 'allow', by: 'ana' });
    expect((await store.get(id))?.value.status).toBe('allowed');
  });

  it('closes the request with the task’s ending when the step stops because the task ended', async () => {
    const { store, gate, pendingId } = setUp();
    const abort = new AbortController();
    const decision = gate.approve(ask, scope, abort.signal);
    const id = await pendingId();
    abort.abort(new TaskEndedError(scope.taskId, { status: 'cancelled' }));
    await expect(decision).rejects.toMatchObject({ name: 'ToolError', code: 'cancelled' });
    expect((await store.get(id))?.value).toMatchObject({
      status: 'closed',
      taskEnded: { status: 'cancelled' },
    });
  });

  it('re-attaches to a request asked before and takes its stored decision without asking again', async () => {
    const first = setUp();
    const decision = first.gate.approve(ask, scope, new AbortController().signal);
    const id = await first.pendingId();
    await first.decide(id, { decision: 'allow', by: 'ana' });
    await decision;
    const asked = first.bus.eventsOf('approval.requested').length;
    await expect(first.gate.approve(ask, scope, new AbortController().signal, { id })).resolves.toMatchObject(
      {
        decision: 'allow',
        by: 'ana',
      },
    );
    expect(first.bus.eventsOf('approval.requested')).toHaveLength(asked);
  });

  it('announces a request it takes up still pending again, under the same event id', async () => {
    // The run that asked recorded the request (its id journaled, its record pending) and may have died before its
    // announcement went out: the next run's, in another process, is the one people hear.
    const first = setUp();
    const abort = new AbortController();
    const asked = first.gate.ask('Which file?', scope, abort.signal);
    const id = await first.pendingId();
    const announced = first.bus.eventsOf('human.asked')[0]?.id;
    first.gate.leavePending(scope.stepId);
    abort.abort(new Error('the process died'));
    await expect(asked).rejects.toMatchObject({ code: 'cancelled' });
    const next = setUp(first.bucket);
    const answer = next.gate.ask('Which file?', scope, new AbortController().signal, { id });
    await expect.poll(() => next.bus.eventsOf('human.asked').map((e) => e.data.questionId)).toEqual([id]);
    expect(next.bus.eventsOf('human.asked')[0]?.id).toBe(announced);
    await expect(next.decide(id, { answer: 'a.txt', by: 'ana' })).resolves.toMatchObject({
      outcome: 'answered',
    });
    await expect(answer).resolves.toBe('a.txt');
  });

  it('leaves the request pending for the next run when its step moves elsewhere', async () => {
    const { store, gate, pendingId } = setUp();
    const abort = new AbortController();
    const decision = gate.approve(ask, scope, abort.signal);
    const id = await pendingId();
    gate.leavePending(scope.stepId);
    abort.abort(new Error('taken over'));
    await expect(decision).rejects.toMatchObject({ code: 'cancelled' });
    expect((await store.get(id))?.value.status).toBe('pending');
  });

  it('announces a request with no round trip to the server first, its subject already listened on', async () => {
    /** A server that never answers a PING (a link gone quiet): a flush never settles. Notes who listened at each event. */
    class QuietServerBus extends MemoryBus {
      readonly listenedAtAnnouncement: boolean[] = [];
      override flush(): Promise<void> {
        return new Promise(() => {});
      }
      override publishEvent(event: TroupeEvent): Promise<boolean> {
        if (event.kind === 'approval.requested') {
          const subject = subjects.approval(scope.pipeline, scope.taskId, event.data.approvalId);
          this.listenedAtAnnouncement.push(this.hasListener(subject));
        }
        return super.publishEvent(event);
      }
    }
    const { bus, gate, pendingId, decide } = setUp(undefined, (clock) => new QuietServerBus({ clock }));
    const decision = gate.approve(ask, scope, new AbortController().signal);
    const id = await pendingId();
    expect((bus as QuietServerBus).listenedAtAnnouncement).toEqual([true]);
    await expect(decide(id, { decision: 'allow', by: 'ana' })).resolves.toMatchObject({ ok: true, id });
    await expect(decision).resolves.toMatchObject({ decision: 'allow', by: 'ana' });
  });

  it('fails the call, not the process, when it cannot listen for a reply (the connection is closing)', async () => {
    const { bus, gate } = setUp();
    await bus.close();
    await expect(gate.approve(ask, scope, new AbortController().signal)).rejects.toThrow();
    expect(gate.waitingOn(scope.stepId)).toBeUndefined();
  });

  it('asks a question, tells listeners it waits, and returns the answer', async () => {
    const { bus, gate, pendingId, decide } = setUp();
    const changes: string[] = [];
    gate.onWaitingChange((stepId) => changes.push(stepId));
    const answer = gate.ask('Which file?', scope, new AbortController().signal);
    const id = await pendingId();
    expect(gate.waitingOn(scope.stepId)).toEqual({ kind: 'question', id });
    await expect(decide(id, { answer: 'a.txt', by: 'ana' })).resolves.toMatchObject({ outcome: 'answered' });
    await expect(answer).resolves.toBe('a.txt');
    expect(changes).toEqual([scope.stepId, scope.stepId]);
    expect(bus.eventsOf('human.answered')[0]?.data).toMatchObject({ questionId: id, answer: 'a.txt' });
  });

  it('fails a question nobody answers in time with a timeout the agent can read', async () => {
    const { clock, gate, pendingId } = setUp();
    const answer = gate.ask('Which file?', { ...scope, timeoutMs: 5_000 }, new AbortController().signal);
    await pendingId();
    clock.advance(5_000);
    await expect(answer).rejects.toMatchObject({
      code: 'timeout',
      message: expect.stringContaining('nobody answered within 5 s'),
    });
  });
});
