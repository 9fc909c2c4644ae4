import { buildTaskTrace } from '@troupe/client';
import type { EventData, EventKind, TroupeEvent } from '@troupe/protocol';
import { EventFactory } from '@troupe/runtime';
import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { formatTrace } from '../src/format/formatTrace.ts';

const start = Date.UTC(2026, 0, 1, 12, 0, 0);
let now = start;
const factory = new EventFactory({ now: () => now });
const scope = {
  pipeline: 'demo',
  taskId: 't1',
  traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
};
const at = <K extends EventKind>(
  atMs: number,
  kind: K,
  data: z.input<(typeof EventData)[K]>,
): TroupeEvent => {
  now = start + atMs;
  return factory.make(kind, scope, data);
};
const write = { agent: 'writer', stepId: 't1.write.1' };
const request = (turn: number) => ({
  ...write,
  turn,
  provider: 'openai',
  model: 'gpt-x',
  messages: 2,
  tools: [],
});

/** A task paused during its step, told something while paused, resumed; its agent read the message before turn 2. */
const steered: TroupeEvent[] = [
  at(0, 'task.accepted', { goal: 'write the notes' }),
  at(5, 'step.started', { step: 'write', agent: 'writer', round: 1, stepId: 't1.write.1' }),
  at(6, 'llm.request', request(1)),
  at(100, 'task.paused', { state: 'write', round: 1, by: 'ops', reason: 'wrong API' }),
  at(200, 'task.told', { messageId: 'm-1', text: 'use the v2 API, not v1', by: 'ops' }),
  // A crash while held: the task is delivered again, and that is no person's resume.
  at(250, 'task.resumed', { state: 'write', round: 1, deliveries: 2 }),
  at(4_300, 'task.resumed', {
    state: 'write',
    round: 1,
    deliveries: 2,
    after: 'pause',
    by: 'ops',
    pausedMs: 4_200,
  }),
  at(4_310, 'agent.told', { ...write, turn: 2, messageIds: ['m-1'] }),
  // The step run again after a crash reads it at the same turn, as its journal says, and says so again.
  at(4_311, 'agent.told', { ...write, turn: 2, messageIds: ['m-1'] }),
  at(4_320, 'llm.request', request(2)),
];

describe('a person’s hold, resume and message in a trace', () => {
  it('places the hold, the resume after it and the message in the flow, and the read under the step, once each', () => {
    const trace = buildTaskTrace('t1', steered);
    expect(trace.flow.map((n) => n.kind)).toEqual(['step', 'paused', 'told', 'resumed']);
    expect(trace.flow[1]).toMatchObject({ kind: 'paused', state: 'write', by: 'ops', reason: 'wrong API' });
    expect(trace.flow[2]).toMatchObject({ kind: 'told', messageId: 'm-1', text: 'use the v2 API, not v1' });
    expect(trace.flow[3]).toMatchObject({ kind: 'resumed', state: 'write', by: 'ops', pausedMs: 4_200 });
    // Only the redelivery counts as a resume after a crash.
    expect(trace.resumed).toBe(1);
    const entries = trace.steps[0]?.entries ?? [];
    expect(entries.map((e) => e.kind)).toEqual(['model', 'told', 'model']);
    expect(entries[1]).toEqual({
      kind: 'told',
      at: new Date(start + 4_310).toISOString(),
      turn: 2,
      messages: [{ id: 'm-1', text: 'use the v2 API, not v1' }],
    });
  });

  it('prints them in troupe trace', () => {
    const text = formatTrace(buildTaskTrace('t1', steered), { color: false });
    expect(text).toContain('paused by ops at write: wrong API');
    expect(text).toContain('told m-1 by ops: use the v2 API, not v1');
    expect(text).toContain('resumed by ops at write after 4.2 s paused');
    expect(text).toContain('read m-1 "use the v2 API, not v1" before turn 2');
  });
});
