import type { TroupeEvent } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { eventFilter, parseKinds } from '../src/eventFilter.ts';

const base = {
  ts: '2026-11-29T12:00:00.000Z',
  pipeline: 'demo',
  taskId: 'task-1',
  traceparent: '00-228501cfd9ddc401a594405b2e1a9608-214fbd37f4df7231-01',
};
const handoff: TroupeEvent = {
  ...base,
  id: 'e-1',
  kind: 'agent.handoff',
  from: 'task',
  to: 'planner',
  data: { step: 'plan', round: 1, reason: 'start' },
};
const started: TroupeEvent = {
  ...base,
  id: 'e-2',
  kind: 'step.started',
  from: 'workflow',
  to: 'executor',
  data: { step: 'execute', agent: 'executor', round: 1, stepId: 'task-1.execute.1' },
};
const toolCall: TroupeEvent = {
  ...base,
  id: 'e-3',
  kind: 'tool.call',
  from: 'executor',
  to: 'tool:write_file',
  data: { agent: 'executor', stepId: 'task-1.execute.1', callId: 'c-1', tool: 'write_file', arguments: '{}' },
};
const completed: TroupeEvent = {
  ...base,
  id: 'e-4',
  kind: 'task.completed',
  from: 'workflow',
  to: 'user',
  data: {
    output: 'done',
    rounds: 1,
    usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0, costUsd: 0, modelCalls: 1 },
    usageByAgent: {},
    durationMs: 10,
  },
};
const all = [handoff, started, toolCall, completed];
const shown = (filter: ReturnType<typeof eventFilter>) => all.filter(filter.event).map((e) => e.id);

describe('parseKinds', () => {
  it('takes repeated and comma-separated kinds, and families', () => {
    expect([...parseKinds(['task.completed,tool.call', ' step.started '])]).toEqual([
      'task.completed',
      'tool.call',
      'step.started',
    ]);
    expect([...parseKinds(['task.*'])]).toEqual([
      'task.accepted',
      'task.resumed',
      'task.paused',
      'task.told',
      'task.completed',
      'task.failed',
      'task.cancelled',
    ]);
    expect(parseKinds([]).size).toBe(0);
  });

  it('refuses an unknown kind with exit code 2, naming the closest', () => {
    expect(() => parseKinds(['tool.cal'])).toThrow(
      expect.objectContaining({
        exitCode: 2,
        message: expect.stringMatching(
          /^--kind: no event kind "tool.cal" \(did you mean "tool.call"\?\); kinds: task.accepted, /,
        ),
      }),
    );
    expect(() => parseKinds(['nope.*'])).toThrow(/no event kind "nope.\*"/);
  });
});

describe('eventFilter', () => {
  it('shows everything, reports of invalid messages too, without filters', () => {
    const filter = eventFilter({});
    expect(shown(filter)).toEqual(['e-1', 'e-2', 'e-3', 'e-4']);
    expect(filter.invalid).toBe(true);
  });

  it("shows an agent's events: sent, received, or about it", () => {
    const filter = eventFilter({ agent: 'executor' });
    expect(shown(filter)).toEqual(['e-2', 'e-3']);
    expect(shown(eventFilter({ agent: 'planner' }))).toEqual(['e-1']);
    expect(filter.invalid).toBe(false);
  });

  it('shows the kinds asked for, with the agent when both are given', () => {
    expect(shown(eventFilter({ kinds: new Set(['task.completed', 'tool.call']) }))).toEqual(['e-3', 'e-4']);
    expect(
      shown(eventFilter({ agent: 'executor', kinds: new Set(['task.completed', 'tool.call']) })),
    ).toEqual(['e-3']);
    expect(eventFilter({ kinds: new Set(['tool.call']) }).invalid).toBe(false);
    expect(eventFilter({ kinds: new Set(['message.invalid']) }).invalid).toBe(true);
  });
});
