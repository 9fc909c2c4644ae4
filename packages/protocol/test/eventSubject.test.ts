import { describe, expect, it } from 'vitest';
import { onItsSubject, parseEvent } from '../src/eventSubject.ts';

const event = {
  id: 't-1:task.completed',
  ts: '2026-12-02T12:00:00.000Z',
  pipeline: 'demo',
  taskId: 't-1',
  kind: 'task.completed',
  traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
  data: {
    output: 'done',
    rounds: 1,
    usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
    usageByAgent: {},
    durationMs: 1,
  },
};

describe('parseEvent', () => {
  it('takes an event on its own subject', () => {
    const parsed = parseEvent(JSON.stringify(event), 'troupe.events.demo.t-1.task.completed');
    expect(parsed.ok).toBe(true);
  });

  it('refuses one whose kind, task or pipeline is not its subject’s, naming both', () => {
    for (const subject of [
      'troupe.events.demo.t-1.tool.call',
      'troupe.events.demo.t-2.task.completed',
      'troupe.events.other.t-1.task.completed',
    ]) {
      const parsed = parseEvent(JSON.stringify(event), subject);
      expect(parsed).toMatchObject({
        ok: false,
        reason: `the event says it is task.completed of task t-1 (demo), which is published on troupe.events.demo.t-1.task.completed, but it came on ${subject}`,
      });
      expect(onItsSubject(event as never, subject)).toBe(false);
    }
  });

  it('refuses what is no event at all, as parseMessage does', () => {
    expect(parseEvent('{"kind": 1}', 'troupe.events.demo.t-1.task.completed').ok).toBe(false);
  });
});
