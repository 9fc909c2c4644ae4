import { eventsOf, subjects, type TroupeEvent } from '@troupe/protocol';
import { SimulatedClock } from '@troupe/testkit';
import { describe, expect, it } from 'vitest';
import { batchId, DEFAULT_EVENT_LINGER_MS, EventBatcher } from '../../src/transport/eventBatcher.ts';
import type { OutgoingEvent } from '../../src/transport/eventOutbox.ts';

const TRACEPARENT = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';

function toolCall(n: number, taskId = 't-1', args = '{}'): TroupeEvent {
  return {
    id: `${taskId}:tool.call:${n}`,
    ts: new Date(0).toISOString(),
    pipeline: 'demo',
    taskId,
    kind: 'tool.call',
    traceparent: TRACEPARENT,
    data: { agent: 'coder', stepId: 's-1', callId: `c-${n}`, tool: 'read', arguments: args },
  };
}

function paused(taskId = 't-1'): TroupeEvent {
  return {
    id: `${taskId}:task.paused`,
    ts: new Date(0).toISOString(),
    pipeline: 'demo',
    taskId,
    kind: 'task.paused',
    traceparent: TRACEPARENT,
    data: { state: 'code', round: 1 },
  };
}

function stepCompleted(taskId = 't-1'): TroupeEvent {
  return {
    id: `${taskId}:step.completed:s-1`,
    ts: new Date(0).toISOString(),
    pipeline: 'demo',
    taskId,
    kind: 'step.completed',
    traceparent: TRACEPARENT,
    data: {
      step: 'code',
      agent: 'coder',
      round: 1,
      stepId: 's-1',
      ok: true,
      output: 'done',
      usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 1 },
      turns: 1,
      durationMs: 3,
    },
  };
}

function setUp(
  options: { maxEvents?: number; maxBytes?: number; stored?: boolean; defaultLinger?: boolean } = {},
) {
  const clock = new SimulatedClock();
  const sent: OutgoingEvent[] = [];
  const batcher = new EventBatcher({
    clock,
    ...(options.defaultLinger ? {} : { lingerMs: 2 }),
    ...(options.maxEvents === undefined ? {} : { maxEvents: options.maxEvents }),
    ...(options.maxBytes === undefined ? {} : { maxBytes: options.maxBytes }),
    send: (message) => {
      sent.push(message);
      return Promise.resolve(options.stored ?? true);
    },
  });
  const add = (event: TroupeEvent) => batcher.add({ event, data: JSON.stringify(event) });
  /** The event ids each message sent carries, read as a reader reads them. */
  const idsSent = () =>
    sent.map((m) => {
      const parsed = eventsOf(m.data, m.subject);
      if (!parsed.ok) throw new Error(parsed.reason);
      return parsed.value.map((e) => e.id);
    });
  return { clock, sent, batcher, add, idsSent };
}

describe('EventBatcher', () => {
  it('sends a task’s events of one linger as one message on its batch subject, in order, with their ids', async () => {
    const { clock, sent, add, idsSent } = setUp();
    const stored = [add(toolCall(1)), add(toolCall(2)), add(toolCall(3))];
    expect(sent).toHaveLength(0);
    clock.advance(2);
    expect(sent).toHaveLength(1);
    expect(sent[0]?.subject).toBe(subjects.eventBatch('demo', 't-1'));
    expect(idsSent()).toEqual([[toolCall(1).id, toolCall(2).id, toolCall(3).id]]);
    expect(sent[0]?.id).toBe(batchId([toolCall(1).id, toolCall(2).id, toolCall(3).id]));
    expect(sent[0]?.headers).toEqual({ traceparent: TRACEPARENT });
    expect(await Promise.all(stored)).toEqual([true, true, true]);
  });

  it('sends the open batch before a task.* event of the same task, so order holds across subjects', () => {
    const { sent, add, idsSent } = setUp();
    void add(toolCall(1));
    void add(toolCall(2));
    void add(paused());
    expect(sent.map((m) => m.subject)).toEqual([
      subjects.eventBatch('demo', 't-1'),
      subjects.event('demo', 't-1', 'task.paused'),
    ]);
    expect(idsSent().flat()).toEqual([toolCall(1).id, toolCall(2).id, paused().id]);
  });

  it('lingers 20 ms by default, so a quick step’s events share a batch', () => {
    const { clock, sent, add, idsSent } = setUp({ defaultLinger: true });
    expect(DEFAULT_EVENT_LINGER_MS).toBe(20);
    void add(toolCall(1));
    clock.advance(19);
    void add(toolCall(2));
    expect(sent).toHaveLength(0);
    clock.advance(1);
    expect(idsSent()).toEqual([[toolCall(1).id, toolCall(2).id]]);
  });

  it('sends one task’s open batch at once when asked (before its checkpoint), the others’ staying open', async () => {
    const { clock, sent, add, batcher, idsSent } = setUp({ defaultLinger: true });
    const stored = [add(toolCall(1)), add(toolCall(2, 't-2')), add(stepCompleted()), add(toolCall(3))];
    // A step's end does not close its batch: the events the workflow makes as the next step starts join it.
    expect(sent).toHaveLength(0);
    batcher.flushTask('demo', 't-1');
    expect(sent.map((m) => m.subject)).toEqual([subjects.eventBatch('demo', 't-1')]);
    expect(idsSent()).toEqual([[toolCall(1).id, stepCompleted().id, toolCall(3).id]]);
    expect(await Promise.all([stored[0], stored[2], stored[3]])).toEqual([true, true, true]);
    // Nothing open: nothing sent.
    batcher.flushTask('demo', 't-1');
    batcher.flushTask('demo', 't-4');
    expect(sent).toHaveLength(1);
    // Another task's batch still lingers, its timer untouched.
    clock.advance(20);
    expect(idsSent()[1]).toEqual([toolCall(2, 't-2').id]);
    // A lone event goes on its own subject.
    void add(stepCompleted('t-3'));
    batcher.flushTask('demo', 't-3');
    expect(sent.at(-1)?.subject).toBe(subjects.event('demo', 't-3', 'step.completed'));
  });

  it('refuses a linger that is not a number of milliseconds, 0 or more', () => {
    for (const lingerMs of [-1, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => new EventBatcher({ lingerMs, send: () => Promise.resolve(true) })).toThrow(RangeError);
    }
  });

  it('keeps other tasks’ batches open when one task’s task.* event goes', () => {
    const { clock, sent, add, idsSent } = setUp();
    void add(toolCall(1, 't-2'));
    void add(toolCall(1));
    void add(paused());
    expect(idsSent()).toEqual([[toolCall(1).id], [paused().id]]);
    clock.advance(2);
    expect(idsSent()[2]).toEqual([toolCall(1, 't-2').id]);
    expect(sent).toHaveLength(3);
  });

  it('sends a lone event on its own subject, as without batching', () => {
    const { clock, sent, add } = setUp();
    void add(toolCall(1));
    clock.advance(2);
    expect(sent).toEqual([
      {
        id: toolCall(1).id,
        subject: subjects.event('demo', 't-1', 'tool.call'),
        data: JSON.stringify(toolCall(1)),
        headers: { traceparent: TRACEPARENT },
      },
    ]);
  });

  it('sends a batch once it holds maxEvents, or before it would pass maxBytes', () => {
    const byCount = setUp({ maxEvents: 2 });
    for (let n = 1; n <= 5; n++) void byCount.add(toolCall(n));
    expect(byCount.idsSent()).toHaveLength(2);
    byCount.clock.advance(2);
    expect(byCount.idsSent().map((ids) => ids.length)).toEqual([2, 2, 1]);

    const size = JSON.stringify(toolCall(1)).length;
    const byBytes = setUp({ maxBytes: size * 2 + 1 });
    for (let n = 1; n <= 3; n++) void byBytes.add(toolCall(n));
    byBytes.clock.advance(2);
    expect(byBytes.idsSent().map((ids) => ids.length)).toEqual([2, 1]);
  });

  it('counts maxBytes in UTF-8 bytes, so a batch of text outside ASCII stays under it on the wire', () => {
    const text = (n: number) => toolCall(n, 't-1', JSON.stringify({ note: '漢字'.repeat(200) }));
    const bytesOf = (event: TroupeEvent) => Buffer.byteLength(JSON.stringify(event), 'utf8');
    const maxBytes = bytesOf(text(1)) * 2 + 1;
    // Three characters' bytes each: counted by the string's length, all three would fit in one batch.
    expect(JSON.stringify(text(1)).length * 3).toBeLessThan(maxBytes);
    const { clock, sent, add, idsSent } = setUp({ maxBytes });
    for (let n = 1; n <= 3; n++) void add(text(n));
    clock.advance(2);
    expect(idsSent().map((ids) => ids.length)).toEqual([2, 1]);
    for (const message of sent) {
      const parsed = eventsOf(message.data, message.subject);
      if (!parsed.ok) throw new Error(parsed.reason);
      expect(parsed.value.reduce((sum, event) => sum + bytesOf(event), 0)).toBeLessThanOrEqual(maxBytes);
    }
  });

  it('fills a batch of ASCII events up to maxBytes, not to the third of it their worst-case size would allow', () => {
    const size = Buffer.byteLength(JSON.stringify(toolCall(1)), 'utf8');
    const { clock, add, idsSent } = setUp({ maxBytes: size * 5 + 1 });
    for (let n = 1; n <= 6; n++) void add(toolCall(n));
    clock.advance(2);
    expect(idsSent().map((ids) => ids.length)).toEqual([5, 1]);
  });

  it('tells every event of a batch the batch’s outcome', async () => {
    const { clock, add } = setUp({ stored: false });
    const stored = [add(toolCall(1)), add(toolCall(2))];
    clock.advance(2);
    expect(await Promise.all(stored)).toEqual([false, false]);
  });

  it('flushAll sends every open batch at once', () => {
    const { batcher, sent, add } = setUp();
    void add(toolCall(1));
    void add(toolCall(1, 't-2'));
    expect(batcher.size).toBe(2);
    batcher.flushAll();
    expect(sent).toHaveLength(2);
    expect(batcher.size).toBe(0);
  });
});

describe('batchId', () => {
  it('is the same for the same events, and another for the same first event grouped with other facts', () => {
    expect(batchId(['a', 'b'])).toBe(batchId(['a', 'b']));
    expect(batchId(['a', 'b'])).not.toBe(batchId(['a', 'c']));
    expect(batchId(['a', 'b'])).toMatch(/^a~2~/);
  });
});
