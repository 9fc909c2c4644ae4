import { type ApprovalDecision, DecisionReceipt, HumanRequest, subjects } from '@troupe/protocol';
import {
  createLogger,
  EventFactory,
  holdTaskRequests,
  JournalEntry,
  NatsHumanGate,
  StepJournal,
  underPrefix,
} from '@troupe/runtime';
import { MemoryKv } from '@troupe/testkit';
import { describe, expect, it } from 'vitest';
import { HOUR, pipeline, setUp } from './support/steeringRunner.ts';

const APPROVAL_MS = 60_000;
const oneStep = pipeline([{ id: 'plan', kind: 'agent', agent: 'planner' }]);
const ask = {
  callId: 'call-1',
  index: 0,
  tool: 'write_file',
  arguments: '{"path":"a"}',
  reason: 'writes a file',
};

/**
 * A coordinator with its approvals bucket and step journal, as `coordinator.ts` wires them: it holds a task's pending
 * requests to people as it records the pause and lets them go at the resume. Agent hosts are gates on its bus and clock.
 */
async function setUpWithRequests() {
  const approvals = new MemoryKv(HumanRequest);
  const journal = new StepJournal(new MemoryKv(JournalEntry));
  let now = () => 0;
  const runner = await setUp(oneStep, {
    holdRequests: (taskId, change) =>
      holdTaskRequests(taskId, change, { journal, store: underPrefix(approvals, 'unit'), now: () => now() }),
  });
  now = () => runner.clock.now();
  const { bus, clock } = runner;
  /** An agent host's gate: one that asks, dies, and another that takes the request up. */
  const host = () =>
    new NatsHumanGate({
      bus,
      store: approvals,
      events: new EventFactory(clock),
      clock,
      logger: createLogger({ level: 'silent' }),
      timeoutMs: APPROVAL_MS,
    });
  const record = async (id: string) => (await approvals.get(`unit.${id}`))?.value;
  const decide = (taskId: string, id: string, decision: ApprovalDecision) =>
    bus.request(subjects.approval('unit', taskId, id), decision, DecisionReceipt, { timeoutMs: 1_000 });
  return { ...runner, journal, host, record, decide };
}

describe('a request to a person whose asker is down when its task is paused', () => {
  it('is held by the coordinator, and after a resume past its expiresAt is still pending and answerable, not denied by default', async () => {
    const { intake, next, control, clock, bus, journal, host, record, decide } = await setUpWithRequests();
    intake.deliver({ id: 'hr-1', goal: 'build it' });
    const step = await next('hr-1.plan.1');
    const scope = {
      pipeline: 'unit',
      taskId: 'hr-1',
      traceparent: step.value.traceparent ?? '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
      agent: 'planner',
      stepId: step.value.stepId,
    };
    const key = StepJournal.humanKey(StepJournal.toolKey(scope.stepId, 1, 0), 'approval');
    // The step's host asks a person, then dies: its request stays pending in KV, and nothing holds it.
    const first = host();
    const dies = new AbortController();
    const asked = first
      .approve(ask, scope, dies.signal, {
        onAsked: (id) => journal.recordHumanRequest(key, id, new Date(clock.now())),
      })
      .catch((error: unknown) => error);
    await expect.poll(() => first.waitingOn(scope.stepId)).toBeDefined();
    const id = first.waitingOn(scope.stepId)?.id as string;
    first.detach();
    dies.abort();
    await asked;
    clock.advance(20_000);

    await control('hr-1', { action: 'pause', by: 'ana' });
    await expect
      .poll(async () => (await record(id))?.held)
      .toEqual({ since: new Date(clock.now()).toISOString(), leftMs: 40_000 });
    // Hours past its expiresAt, the task still paused.
    clock.advance(HOUR);
    await bus.settled();
    expect((await record(id))?.status).toBe('pending');

    await control('hr-1', { action: 'resume', by: 'ana' });
    const resumedAt = clock.now();
    await expect
      .poll(async () => await record(id))
      .toMatchObject({ status: 'pending', expiresAt: new Date(resumedAt + 40_000).toISOString() });
    expect((await record(id))?.held).toBeUndefined();

    // The run of the step sent again after the resume takes the request up: it waits, and takes the person's decision.
    const second = host();
    const decision = second.approve(ask, scope, new AbortController().signal, { id });
    await expect.poll(() => second.waitingOn(scope.stepId)).toBeDefined();
    await expect(decide('hr-1', id, { decision: 'allow', by: 'bo' })).resolves.toMatchObject({
      ok: true,
      outcome: 'allow',
    });
    await expect(decision).resolves.toEqual({ decision: 'allow', by: 'bo' });
    expect((await record(id))?.status).toBe('allowed');
    expect(bus.eventsOf('approval.decided').map((e) => e.data)).toEqual([
      expect.objectContaining({ decision: 'allow', by: 'bo' }),
    ]);
  });

  it('is held beside an asker that holds it too: one hold, one let-go, and a decision while held is taken once', async () => {
    const { intake, next, control, clock, bus, journal, host, record, decide } = await setUpWithRequests();
    intake.deliver({ id: 'hr-2', goal: 'build it' });
    const step = await next('hr-2.plan.1');
    const scope = {
      pipeline: 'unit',
      taskId: 'hr-2',
      traceparent: step.value.traceparent ?? '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
      agent: 'planner',
      stepId: step.value.stepId,
    };
    const key = StepJournal.humanKey(StepJournal.toolKey(scope.stepId, 1, 0), 'approval');
    const asker = host();
    const decision = asker.approve(ask, scope, new AbortController().signal, {
      onAsked: (id) => journal.recordHumanRequest(key, id, new Date(clock.now())),
    });
    await expect.poll(() => asker.waitingOn(scope.stepId)).toBeDefined();
    const id = asker.waitingOn(scope.stepId)?.id as string;
    clock.advance(20_000);
    // The coordinator records the pause and holds the request; the asker hears the pause later and holds it too,
    // over the revision it had: its write loses to the coordinator's.
    await control('hr-2', { action: 'pause', by: 'ana' });
    await expect.poll(async () => (await record(id))?.held?.leftMs).toBe(40_000);
    asker.hold('hr-2');
    clock.advance(HOUR);
    await bus.settled();
    await control('hr-2', { action: 'resume', by: 'ana' });
    const resumedAt = clock.now();
    const letGo = { status: 'pending', expiresAt: new Date(resumedAt + 40_000).toISOString() };
    await expect.poll(async () => await record(id)).toMatchObject(letGo);
    // So with the let-go: the coordinator's came first.
    asker.letGo('hr-2');
    await bus.settled();
    expect(await record(id)).toMatchObject(letGo);
    expect((await record(id))?.held).toBeUndefined();
    // The asker's lost writes left it on the record as it is: the person's decision is taken, not refused as decided.
    await expect(decide('hr-2', id, { decision: 'allow', by: 'bo' })).resolves.toMatchObject({
      ok: true,
      outcome: 'allow',
    });
    await expect(decision).resolves.toEqual({ decision: 'allow', by: 'bo' });
    expect((await record(id))?.status).toBe('allowed');
  });
});
