import type { TroupeEvent } from '@troupe/protocol';
import { createLogger } from '@troupe/runtime';
import { describe, expect, it } from 'vitest';
import { InProcessBus } from '../../src/inProcess/inProcessBus.ts';

const event = (taskId: string, kind: string, n: number): TroupeEvent =>
  ({
    id: `${taskId}-${kind}-${n}`,
    ts: new Date(0).toISOString(),
    pipeline: 'demo',
    taskId,
    kind,
    data: { n },
    traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
  }) as unknown as TroupeEvent;

describe('InProcessBus', () => {
  it("hands a task's events to its listener as the objects published, in order, after the publisher's call", async () => {
    const bus = new InProcessBus({ keepHistory: true });
    const heard: TroupeEvent[] = [];
    bus.listen('t-1', (e) => heard.push(e));
    const first = event('t-1', 'step.started', 1);
    const second = event('t-1', 'llm.response', 2);
    bus.publishEvent(first);
    bus.publishEvent(second);
    bus.publishEvent(event('t-2', 'step.started', 3));
    expect(heard).toEqual([]);
    await bus.settled();
    expect(heard).toHaveLength(2);
    expect(heard[0]).toBe(first);
    expect(heard[1]).toBe(second);
    // Nobody else subscribes to these subjects: nothing was carried as text.
    expect(bus.messages).toEqual([]);
  });

  it('carries an event on the bus too when a part of the process subscribes to its subject', async () => {
    const bus = new InProcessBus({ keepHistory: true });
    const heard: TroupeEvent[] = [];
    const onBus: string[] = [];
    bus.listen('t-1', (e) => heard.push(e));
    bus.subscribeText('troupe.events.demo.*.task.cancelled', (delivery) => void onBus.push(delivery.value));
    bus.publishEvent(event('t-1', 'task.cancelled', 1));
    bus.publishEvent(event('t-1', 'step.completed', 2));
    await bus.settled();
    expect(heard.map((e) => e.kind)).toEqual(['task.cancelled', 'step.completed']);
    expect(onBus.map((text) => (JSON.parse(text) as TroupeEvent).kind)).toEqual(['task.cancelled']);
    expect(bus.messages.map((m) => m.subject)).toEqual(['troupe.events.demo.t-1.task.cancelled']);
  });

  it('keeps going past a listener that throws, and a stopped listener hears nothing more', async () => {
    const errors: string[] = [];
    const logger = createLogger({
      level: 'error',
      destination: { write: (line: string) => void errors.push(line) },
    });
    const bus = new InProcessBus({ logger });
    const heard: number[] = [];
    const stop = bus.listen('t-1', (e) => {
      heard.push((e.data as unknown as { n: number }).n);
      if (heard.length === 1) throw new Error('listener broke');
    });
    expect(() => bus.publishEvent(event('t-1', 'step.started', 1))).not.toThrow();
    bus.publishEvent(event('t-1', 'step.started', 2));
    await bus.settled();
    expect(heard).toEqual([1, 2]);
    expect(errors.join('')).toContain('listener broke');
    bus.publishEvent(event('t-1', 'step.started', 3));
    stop();
    await bus.settled();
    expect(heard).toEqual([1, 2]);
  });
});
