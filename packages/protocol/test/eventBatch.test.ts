import { describe, expect, it } from 'vitest';
import { EventMessage, eventsIn, eventsOf, isBatchable } from '../src/eventBatch.ts';
import { subjects } from '../src/subjects.ts';

const base = {
  ts: '2026-12-02T12:00:00.000Z',
  pipeline: 'demo',
  taskId: 't-1',
  traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
};
const started = {
  ...base,
  id: 't-1:step.started:plan',
  kind: 'step.started',
  data: { step: 'plan', agent: 'planner', round: 1, stepId: 's-1', input: 'go' },
};
const call = {
  ...base,
  id: 't-1:tool.call:plan:0',
  kind: 'tool.call',
  data: { agent: 'planner', stepId: 's-1', callId: 'c-1', tool: 'read', arguments: '{}' },
};
const completed = {
  ...base,
  id: 't-1:task.completed',
  kind: 'task.completed',
  data: {
    output: 'done',
    rounds: 1,
    usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
    usageByAgent: {},
    durationMs: 1,
  },
};
const batchSubject = subjects.eventBatch('demo', 't-1');

describe('eventsOf', () => {
  it('hands back one event on its own subject as a list of one', () => {
    const parsed = eventsOf(JSON.stringify(completed), subjects.event('demo', 't-1', 'task.completed'));
    expect(parsed).toMatchObject({ ok: true, value: [{ id: completed.id }] });
  });

  it('still refuses a lone event on a subject that is not its own', () => {
    const parsed = eventsOf(JSON.stringify(completed), subjects.event('demo', 't-1', 'tool.call'));
    expect(parsed.ok).toBe(false);
  });

  it('hands back a batch’s events in their order, each with its own id', () => {
    const parsed = eventsOf(JSON.stringify({ batch: 'b-1', events: [started, call] }), batchSubject);
    expect(parsed.ok && parsed.value.map((e) => e.id)).toEqual([started.id, call.id]);
  });

  it('is under the task’s events subject, so a filter on the task’s events matches it', () => {
    expect(batchSubject).toBe('troupe.events.demo.t-1.batch');
    expect(batchSubject.startsWith(subjects.taskEvents('t-1', 'demo').slice(0, -1))).toBe(true);
  });

  it('refuses a whole batch holding an event of another task or pipeline, naming it', () => {
    for (const stranger of [
      { ...call, taskId: 't-2' },
      { ...call, pipeline: 'other' },
    ]) {
      const parsed = eventsOf(JSON.stringify({ batch: 'b-1', events: [started, stranger] }), batchSubject);
      expect(parsed).toMatchObject({ ok: false });
      expect(!parsed.ok && parsed.reason).toContain(`holds event ${call.id} of task ${stranger.taskId}`);
    }
  });

  it('refuses a batch holding a kind that is never batched (a forged task end)', () => {
    const parsed = eventsOf(JSON.stringify({ batch: 'b-1', events: [started, completed] }), batchSubject);
    expect(parsed).toMatchObject({
      ok: false,
      reason: `the batch b-1 on ${batchSubject} holds a task.completed event (${completed.id}), which is never batched`,
    });
  });

  it('refuses an empty or malformed batch', () => {
    expect(eventsOf(JSON.stringify({ batch: 'b-1', events: [] }), batchSubject).ok).toBe(false);
    expect(eventsOf(JSON.stringify(started), batchSubject).ok).toBe(false);
  });
});

describe('isBatchable', () => {
  it('keeps out the kinds other processes follow by subject', () => {
    for (const kind of ['task.completed', 'task.paused', 'task.told', 'approval.requested', 'human.asked'])
      expect(isBatchable(kind)).toBe(false);
    // The gateway reads a task's online score from EVENTS by its subject.
    expect(isBatchable('eval.scored')).toBe(false);
    for (const kind of ['step.started', 'llm.response', 'tool.result', 'step.completed', 'agent.handoff'])
      expect(isBatchable(kind)).toBe(true);
  });
});

describe('eventsIn', () => {
  it('checks a validated message as eventsOf checks its bytes', () => {
    const batch = EventMessage.parse({ batch: 'b-1', events: [started, call] });
    expect(eventsIn(batch, batchSubject)).toMatchObject({
      ok: true,
      value: [{ id: started.id }, { id: call.id }],
    });
    expect(eventsIn(batch, subjects.event('demo', 't-1', 'tool.call')).ok).toBe(false);
    const one = EventMessage.parse(call);
    expect(eventsIn(one, subjects.event('demo', 't-1', 'tool.call'))).toMatchObject({
      ok: true,
      value: [{ id: call.id }],
    });
    expect(eventsIn(one, batchSubject).ok).toBe(false);
    const forged = EventMessage.parse({ batch: 'b-1', events: [completed] });
    expect(eventsIn(forged, batchSubject).ok).toBe(false);
  });
});
