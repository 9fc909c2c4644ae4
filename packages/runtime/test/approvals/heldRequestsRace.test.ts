import { DecisionReceipt, type HumanRequest, subjects } from '@troupe/protocol';
import { MemoryBus, MemoryKv, SimulatedClock } from '@troupe/testkit';
import { describe, expect, it } from 'vitest';
import { holdTaskRequests } from '../../src/approvals/heldRequests.ts';
import { NatsHumanGate } from '../../src/approvals/humanGate.ts';
import { underPrefix } from '../../src/durable/kvStore.ts';
import type { StepJournal } from '../../src/durable/stepJournal.ts';
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

/**
 * An asker's gate (an agent host's) and the coordinator's hold and let-go of the task's requests, on one bucket: the
 * two write the same records, compared and set, and either may write first.
 */
function setUp() {
  const clock = new SimulatedClock();
  const bus = new MemoryBus({ clock });
  const bucket = new MemoryKv<HumanRequest>();
  const gate = new NatsHumanGate({
    bus,
    store: bucket,
    events: new EventFactory(clock),
    clock,
    logger: createLogger({ level: 'silent' }),
    timeoutMs: TIMEOUT_MS,
  });
  const store = underPrefix(bucket, scope.pipeline);
  const pendingId = async (): Promise<string> => {
    await expect.poll(() => gate.waitingOn(scope.stepId)).toBeDefined();
    await bus.settled();
    return gate.waitingOn(scope.stepId)?.id as string;
  };
  const journalOf = (id: string): Pick<StepJournal, 'humanRequestsOf'> => ({
    humanRequestsOf: async () => [id],
  });
  const coordinator = {
    hold: (id: string) =>
      holdTaskRequests(
        scope.taskId,
        { hold: true, since: clock.now() },
        { journal: journalOf(id), store, now: () => clock.now() },
      ),
    letGo: (id: string) =>
      holdTaskRequests(
        scope.taskId,
        { hold: false, stillResumed: () => true },
        { journal: journalOf(id), store, now: () => clock.now() },
      ),
  };
  const decide = (id: string, payload: unknown) =>
    bus.request(subjects.approval(scope.pipeline, scope.taskId, id), payload, DecisionReceipt, {
      timeoutMs: 1_000,
    });
  return { clock, bus, store, gate, pendingId, coordinator, decide, journalOf };
}

describe("a person's decision on a request the coordinator held or let go before its asker did", () => {
  it('is taken when the coordinator held the request before its asker heard the pause', async () => {
    const { store, gate, pendingId, coordinator, decide } = setUp();
    const decision = gate.approve(ask, scope, new AbortController().signal);
    const id = await pendingId();
    // The coordinator records the pause and holds the request; the asker has not heard the pause yet.
    await expect(coordinator.hold(id)).resolves.toBe(1);
    expect((await store.get(id))?.value.held).toBeDefined();
    // Nobody decided: the person's decision is the one, not refused as decided already.
    await expect(decide(id, { decision: 'allow', by: 'ana' })).resolves.toMatchObject({
      ok: true,
      outcome: 'allow',
    });
    await expect(decision).resolves.toEqual({ decision: 'allow', by: 'ana' });
    expect((await store.get(id))?.value).toMatchObject({ status: 'allowed', by: 'ana' });
    expect((await store.get(id))?.value.held).toBeUndefined();
  });

  it('is taken by an asker that never heard the resume the coordinator let the request go for', async () => {
    const { bus, store, gate, pendingId, coordinator, decide } = setUp();
    const decision = gate.approve(ask, scope, new AbortController().signal);
    const id = await pendingId();
    // The asker hears the pause and holds its request; the resume does not reach it (its connection was down), and the
    // coordinator lets the request go. The asker waits held, with no deadline: only a person's decision moves it on.
    gate.hold(scope.taskId);
    await expect.poll(async () => (await store.get(id))?.value.held).toBeDefined();
    await bus.settled();
    await expect(coordinator.letGo(id)).resolves.toBe(1);
    await expect(decide(id, { decision: 'deny', reason: 'not now', by: 'bo' })).resolves.toMatchObject({
      ok: true,
      outcome: 'deny',
    });
    await expect(decision).resolves.toEqual({ decision: 'deny', reason: 'not now', by: 'bo' });
    expect((await store.get(id))?.value).toMatchObject({ status: 'denied', by: 'bo' });
  });

  it('still loses to a decision that reached the record first', async () => {
    const { store, gate, pendingId, coordinator, decide } = setUp();
    const decision = gate.approve(ask, scope, new AbortController().signal);
    const id = await pendingId();
    await coordinator.hold(id);
    // `troupe approve` wrote a decision into the record itself (as it does when nobody answers it).
    const entry = await store.get(id);
    if (!entry) throw new Error('no record');
    const { held: _held, ...unheld } = entry.value;
    await store.update(
      id,
      { ...unheld, status: 'denied', by: 'cy', decidedAt: unheld.requestedAt },
      entry.revision,
    );
    await expect(decision).resolves.toMatchObject({ decision: 'deny', by: 'cy' });
    await expect(decide(id, { decision: 'allow', by: 'ana' })).rejects.toThrow();
    expect((await store.get(id))?.value).toMatchObject({ status: 'denied', by: 'cy' });
  });
});

describe('a request that runs out at an asker that never heard its task paused', () => {
  it('is recorded expired, as its step took it, though the coordinator held its record meanwhile', async () => {
    const { clock, bus, store, gate, pendingId, coordinator } = setUp();
    const decision = gate.approve(ask, scope, new AbortController().signal);
    const id = await pendingId();
    // The coordinator holds the request at the pause; the asker's host never hears the pause and runs it out.
    await expect(coordinator.hold(id)).resolves.toBe(1);
    clock.advance(TIMEOUT_MS);
    await expect(decision).resolves.toMatchObject({ decision: 'deny', by: 'timeout' });
    await bus.settled();
    expect(bus.eventsOf('approval.decided').map((e) => e.data)).toEqual([
      expect.objectContaining({ approvalId: id, decision: 'deny', expired: true }),
    ]);
    // Not left pending (and held) while the step went on denied: a decision given now would be recorded and never
    // acted on.
    const record = (await store.get(id))?.value;
    expect(record?.status).toBe('expired');
    expect(record?.held).toBeUndefined();
  });
});
