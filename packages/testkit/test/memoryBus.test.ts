import { type ErrorReply, emptyUsage, InvalidMessageEvent, subjects } from '@troupe/protocol';
import { EventFactory, TransportError } from '@troupe/runtime';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { MemoryBus } from '../src/memoryBus.ts';
import { MemoryKv } from '../src/memoryKv.ts';
import { SimulatedClock } from '../src/simulatedClock.ts';

const Ping = z.strictObject({ n: z.number() });

describe('MemoryBus', () => {
  it('matches subjects as NATS does: * one token, > the rest', async () => {
    const bus = new MemoryBus();
    const seen: Record<string, string[]> = { star: [], tail: [], exact: [] };
    bus.subscribeText('a.*.c', (d) => void seen.star?.push(d.subject));
    bus.subscribeText('a.>', (d) => void seen.tail?.push(d.subject));
    bus.subscribeText('a.b', (d) => void seen.exact?.push(d.subject));
    for (const subject of ['a.b.c', 'a.x.c', 'a.b', 'a.b.c.d', 'a', 'b.b.c']) bus.publish(subject, {});
    await bus.settled();
    expect(seen).toEqual({
      star: ['a.b.c', 'a.x.c'],
      tail: ['a.b.c', 'a.x.c', 'a.b', 'a.b.c.d'],
      exact: ['a.b'],
    });
  });

  it('gives each message of a queue group to one member, in turn, and every plain subscriber a copy', async () => {
    const bus = new MemoryBus();
    const got: string[] = [];
    bus.subscribe('work', Ping, (d) => void got.push(`one:${d.value.n}`), { queue: 'workers' });
    bus.subscribe('work', Ping, (d) => void got.push(`two:${d.value.n}`), { queue: 'workers' });
    bus.subscribe('work', Ping, (d) => void got.push(`watch:${d.value.n}`));
    for (const n of [1, 2, 3, 4]) bus.publish('work', { n });
    await bus.settled();
    expect(got.filter((g) => g.startsWith('watch')).length).toBe(4);
    expect(got.filter((g) => g.startsWith('one'))).toEqual(['one:1', 'one:3']);
    expect(got.filter((g) => g.startsWith('two'))).toEqual(['two:2', 'two:4']);
  });

  it('delivers after the publisher returns, with a copy of the payload and its headers', async () => {
    const bus = new MemoryBus();
    const received: { value: { n: number }; headers?: Record<string, string> }[] = [];
    bus.subscribe(
      'copy',
      Ping,
      (d) => void received.push({ value: d.value, ...(d.headers ? { headers: d.headers } : {}) }),
    );
    const payload = { n: 1 };
    bus.publish('copy', payload, undefined, { traceparent: 'tp' });
    expect(received).toEqual([]);
    payload.n = 2;
    await bus.settled();
    expect(received).toEqual([{ value: { n: 1 }, headers: { traceparent: 'tp' } }]);
  });

  it('answers requests, and fails them with no_responders, the responder’s error code, or a timeout on its clock', async () => {
    const clock = new SimulatedClock();
    const bus = new MemoryBus({ clock });
    await expect(bus.request('nobody', { n: 1 }, Ping, { timeoutMs: 1_000 })).rejects.toMatchObject({
      code: 'no_responders',
    });
    bus.subscribe('double', Ping, (d) => d.respond({ n: d.value.n * 2 }));
    await expect(bus.request('double', { n: 21 }, Ping, { timeoutMs: 1_000 })).resolves.toEqual({ n: 42 });
    bus.subscribe('refuse', Ping, (d) =>
      d.respond({ ok: false, error: { code: 'unknown_task', message: 'no task t-1' } } satisfies ErrorReply),
    );
    await expect(bus.request('refuse', { n: 1 }, Ping, { timeoutMs: 1_000 })).rejects.toMatchObject({
      code: 'unknown_task',
      message: 'no task t-1',
    });
    // A code this version does not know is read as refused, the message naming it.
    bus.subscribe('refuse-oddly', Ping, (d) =>
      d.respond({ ok: false, error: { code: 'not_today', message: 'no' } } satisfies ErrorReply),
    );
    await expect(bus.request('refuse-oddly', { n: 1 }, Ping, { timeoutMs: 1_000 })).rejects.toMatchObject({
      code: 'refused',
      message: 'refused (not_today): no',
    });
    bus.subscribe('silent', Ping, () => {});
    const silent = bus.request('silent', { n: 1 }, Ping, { timeoutMs: 1_000 });
    silent.catch(() => {});
    await bus.settled();
    clock.advance(999);
    await bus.settled();
    clock.advance(1);
    await expect(silent).rejects.toSatisfy((error) => TransportError.is(error, 'timeout'));
  });

  it('answers an invalid request with invalid_message and a throwing handler with handler_failed', async () => {
    const bus = new MemoryBus();
    let handled = 0;
    bus.subscribe('strict', Ping, () => void handled++);
    await expect(bus.request('strict', { n: 'one' }, Ping, { timeoutMs: 1_000 })).rejects.toMatchObject({
      code: 'invalid_message',
    });
    bus.subscribe('broken', Ping, () => {
      throw new Error('boom');
    });
    await expect(bus.request('broken', { n: 1 }, Ping, { timeoutMs: 1_000 })).rejects.toMatchObject({
      code: 'handler_failed',
      message: expect.stringContaining('boom'),
    });
    expect(handled).toBe(0);
  });

  it('reports an invalid message nobody waits an answer for on troupe.events._invalid', async () => {
    const bus = new MemoryBus({ name: 'tester' });
    const reports: InvalidMessageEvent[] = [];
    bus.subscribe(subjects.invalid, InvalidMessageEvent, (d) => void reports.push(d.value));
    bus.subscribe('strict', Ping, () => {});
    bus.publish('strict', { n: 'one' });
    await bus.settled();
    expect(reports).toHaveLength(1);
    expect(reports[0]).toMatchObject({ subject: 'strict', reporter: 'tester', payload: '{"n":"one"}' });
  });

  it('keeps every event published, and refuses to send once closed', async () => {
    const bus = new MemoryBus();
    const scope = {
      pipeline: 'p',
      taskId: 't1',
      traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
    };
    const event = new EventFactory().make('task.cancelled', scope, { usage: emptyUsage() });
    const heard: string[] = [];
    bus.subscribeText(subjects.allEvents, (d) => void heard.push(d.subject));
    expect(await bus.publishEvent(event)).toBe(true);
    await bus.settled();
    expect(bus.eventsOf('task.cancelled')).toEqual([event]);
    expect(heard).toEqual([subjects.event('p', 't1', 'task.cancelled')]);
    await bus.close();
    expect(() => bus.publish('late', {})).toThrow(TransportError);
  });
});

describe('MemoryKv', () => {
  it('compares and sets on create and update, with revisions that grow across the bucket', async () => {
    const kv = new MemoryKv(Ping);
    const first = await kv.create('a', { n: 1 });
    expect(first).toBe(1);
    expect(await kv.create('a', { n: 2 })).toBeUndefined();
    expect(await kv.put('b', { n: 3 })).toBe(2);
    expect(await kv.update('a', { n: 4 }, 99)).toBeUndefined();
    expect(await kv.update('a', { n: 4 }, first as number)).toBe(3);
    expect(await kv.get('a')).toEqual({ key: 'a', value: { n: 4 }, revision: 3 });
    await expect(kv.put('c', { n: 'x' } as never)).rejects.toThrow();
  });

  it('lists keys by NATS wildcard and tells watchers the current value, then each write', async () => {
    const kv = new MemoryKv<{ n: number }>();
    await kv.put('t1.a', { n: 1 });
    await kv.put('t1.b.c', { n: 2 });
    await kv.put('t2.a', { n: 3 });
    expect(await kv.keys('t1.>')).toEqual(['t1.a', 't1.b.c']);
    expect(await kv.keys('*.a')).toEqual(['t1.a', 't2.a']);
    const seen: number[] = [];
    const stop = await kv.watch('t1.a', (entry) => void seen.push(entry.value.n));
    await kv.put('t1.a', { n: 5 });
    await new Promise((resolve) => setImmediate(resolve));
    stop();
    await kv.put('t1.a', { n: 6 });
    await new Promise((resolve) => setImmediate(resolve));
    expect(seen).toEqual([1, 5]);
  });
});
