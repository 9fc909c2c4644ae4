import { parseMessage, TroupeEvent } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { ZodError } from 'zod';
import { EventFactory, eventId } from '../../src/events/eventFactory.ts';

const scope = { pipeline: 'demo', taskId: 't-1', traceparent: '00-aa-bb-01' };
const usage = { inputTokens: 1, outputTokens: 2, cachedTokens: 0 };
const response = (turn: number, content: string) => ({
  agent: 'executor',
  stepId: 't-1.execute.1',
  turn,
  provider: 'scripted',
  model: 'm',
  usage,
  costUsd: 0,
  finishReason: 'stop',
  content,
  toolCalls: [],
  durationMs: 5,
});

describe('event ids', () => {
  it('are the same for the same fact, whenever and by whomever it is published', () => {
    const early = new EventFactory({ now: () => 1_000 });
    const late = new EventFactory({ now: () => 9_000 });
    const first = early.make('llm.response', scope, response(2, 'hello'));
    const again = late.make('llm.response', scope, { ...response(2, 'hello'), journaled: true });
    expect(again.id).toBe(first.id);
    expect(again.ts).not.toBe(first.ts);
    expect(first.id).toMatch(/^t-1:llm\.response:t-1\.execute\.1:2:[\w-]{16}$/);
  });

  it('tell apart two different replies to one turn (asked again after one could not be journaled)', () => {
    expect(eventId('t-1', 'llm.response', response(2, 'first'))).not.toBe(
      eventId('t-1', 'llm.response', response(2, 'second')),
    );
  });

  it('tell apart two outcomes of one step, or two routes of one router, and not one outcome published again', () => {
    const completed = (output: string, decision?: 'approve' | 'reject') => ({
      agent: 'reviewer',
      step: 'review',
      round: 1,
      stepId: 't-1.review.1',
      ok: true,
      output,
      ...(decision ? { verdict: { decision, feedback: 'r' } } : {}),
      usage: { ...usage, costUsd: 0, modelCalls: 1 },
      turns: 1,
      durationMs: 5,
    });
    const late = new EventFactory({ now: () => 9_000 });
    expect(late.make('step.completed', scope, completed('fine')).id).toBe(
      new EventFactory({ now: () => 1_000 }).make('step.completed', scope, completed('fine')).id,
    );
    expect(eventId('t-1', 'step.completed', completed('first'))).not.toBe(
      eventId('t-1', 'step.completed', completed('second')),
    );
    expect(eventId('t-1', 'step.completed', completed('same', 'approve'))).not.toBe(
      eventId('t-1', 'step.completed', completed('same', 'reject')),
    );
    const chosen = (target: string) => ({ step: 'pick', round: 1, value: 'v', target });
    expect(eventId('t-1', 'route.chosen', chosen('left'))).not.toBe(
      eventId('t-1', 'route.chosen', chosen('right')),
    );
  });

  it('name tool calls by their position, so calls with repeated or missing ids stay apart', () => {
    const call = (index: number) => ({
      agent: 'a',
      stepId: 's',
      turn: 1,
      index,
      callId: '',
      tool: 'x',
      arguments: '{}',
    });
    expect(eventId('t-1', 'tool.call', call(0))).not.toBe(eventId('t-1', 'tool.call', call(1)));
  });

  it('differ between facts: another turn, step, call, attempt or delivery', () => {
    expect(eventId('t-1', 'llm.response', response(1, 'x'))).not.toBe(
      eventId('t-1', 'llm.response', response(2, 'x')),
    );
    const call = (turn: number, callId: string) => ({
      agent: 'a',
      stepId: 's',
      turn,
      callId,
      tool: 'x',
      arguments: '{}',
    });
    expect(eventId('t-1', 'tool.call', call(1, 'c'))).not.toBe(eventId('t-1', 'tool.call', call(2, 'c')));
    expect(eventId('t-1', 'tool.call', call(1, 'c'))).not.toBe(eventId('t-1', 'tool.call', call(1, 'd')));
    const resumed = (deliveries: number) => ({ state: 'plan', round: 1, deliveries });
    expect(eventId('t-1', 'task.resumed', resumed(2))).not.toBe(eventId('t-1', 'task.resumed', resumed(3)));
    // Two pauses of the same length in one delivery: told apart by when each began.
    const afterPause = (since: string) => ({ ...resumed(1), after: 'pause' as const, pausedMs: 0, since });
    expect(eventId('t-1', 'task.resumed', afterPause('2026-01-01T00:00:00.000Z'))).not.toBe(
      eventId('t-1', 'task.resumed', afterPause('2026-01-01T00:00:01.000Z')),
    );
    expect(eventId('t-1', 'task.accepted', { goal: 'g' })).not.toBe(
      eventId('t-2', 'task.accepted', { goal: 'g' }),
    );
  });

  it('name the final event of a task by its kind alone: it is one fact, republished as often as needed', () => {
    const failed = (message: string) => ({
      reason: 'step_failed' as const,
      message,
      usage: { ...usage, costUsd: 0, modelCalls: 1 },
      durationMs: 1,
    });
    expect(eventId('t-1', 'task.failed', failed('a'))).toBe(eventId('t-1', 'task.failed', failed('b')));
  });
});

describe('checks on the events made', () => {
  const call = {
    agent: 'executor',
    stepId: 't-1.execute.1',
    turn: 1,
    index: 0,
    callId: 'c',
    tool: 'x',
    arguments: '{}',
  };

  it('are none outside tests: an event of our own code is built as typed, and reads back the same', () => {
    const made = new EventFactory({ now: () => 0 }, { strict: false }).make('tool.call', scope, call);
    expect(made.data).toBe(call);
    const read = parseMessage(TroupeEvent, JSON.stringify(made));
    expect(read.ok && read.value).toEqual(made);
  });

  it('refuse, in tests, an event built unlike its schema, which production would publish unparsed', () => {
    const events = new EventFactory({ now: () => 0 });
    expect(() => events.make('tool.call', scope, { ...call, turn: -1 })).toThrow(/turn/);
    const undeclared = { ...call, secretSauce: 1 } as typeof call;
    expect(() => events.make('tool.call', scope, undeclared)).toThrow(
      /event tool\.call of task t-1 was built unlike its schema/,
    );
  });

  it('parse data from outside when told to (replay), refusing a malformed event and dropping undeclared fields', () => {
    const replay = new EventFactory({ now: () => 0 }, { validate: true, strict: false });
    expect(() => replay.make('tool.call', scope, { ...call, turn: -1 })).toThrow(ZodError);
    const extra = { ...call, recordedBy: 'an older version' } as typeof call;
    expect(replay.make('tool.call', scope, extra).data).toEqual(call);
  });

  it('leave readers of the stream refusing a malformed event from another process, as before', () => {
    const made = new EventFactory({ now: () => 0 }, { strict: false }).make('tool.call', scope, call);
    const forged = JSON.stringify({ ...made, data: { ...made.data, turn: 'one' } });
    const read = parseMessage(TroupeEvent, forged);
    expect(read.ok).toBe(false);
  });
});
