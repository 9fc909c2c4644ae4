import { HumanRequest } from '@troupe/protocol';
import { MemoryBus, MemoryKv, SimulatedClock } from '@troupe/testkit';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { NatsHumanGate } from '../../src/approvals/humanGate.ts';
import { RecordWatch } from '../../src/approvals/recordWatch.ts';
import { EventFactory } from '../../src/events/eventFactory.ts';
import { createLogger } from '../../src/logging/logger.ts';

const logger = createLogger({ level: 'silent' });
const pending = (id: string): HumanRequest =>
  HumanRequest.parse({
    id,
    kind: 'question',
    prompt: 'Ship it?',
    taskId: 'task-1',
    pipeline: 'p',
    agent: 'workflow',
    stepId: `task-1.${id}`,
    status: 'pending',
    requestedAt: new Date(0).toISOString(),
    expiresAt: new Date(60_000).toISOString(),
  });

afterEach(() => {
  vi.useRealTimers();
});

describe('RecordWatch', () => {
  it('reads every watched record on one timer: at once, then again after it changed, and not once unwatched', async () => {
    vi.useFakeTimers();
    const store = new MemoryKv(HumanRequest);
    const seen: string[] = [];
    const watch = new RecordWatch(logger);
    const stops = [];
    for (const id of ['q-1', 'q-2', 'q-3']) {
      await store.put(id, pending(id));
      stops.push(watch.watch(store, id, (record) => seen.push(`${record.id}:${record.status}`)));
    }
    await vi.advanceTimersByTimeAsync(0);
    expect(seen).toEqual(['q-1:pending', 'q-2:pending', 'q-3:pending']);
    // Three records, one timer.
    expect(vi.getTimerCount()).toBe(1);
    await store.put('q-2', { ...pending('q-2'), status: 'answered', answer: 'yes' });
    await vi.advanceTimersByTimeAsync(5_000);
    expect(seen.slice(3)).toEqual(['q-2:answered']);
    stops[2]?.();
    await store.put('q-3', { ...pending('q-3'), status: 'answered', answer: 'no' });
    await vi.advanceTimersByTimeAsync(10_000);
    expect(seen.slice(4)).toEqual([]);
    for (const stop of stops) stop();
    expect(vi.getTimerCount()).toBe(0);
    expect(watch.size).toBe(0);
  });

  it('reads nothing and says nothing once closed: its connection is gone, so every read would fail', async () => {
    vi.useFakeTimers();
    const store = new MemoryKv(HumanRequest);
    await store.put('q-1', pending('q-1'));
    const warn = vi.fn();
    const watch = new RecordWatch({ ...logger, warn } as unknown as typeof logger);
    const seen: string[] = [];
    watch.watch(store, 'q-1', (record) => seen.push(record.status));
    await vi.advanceTimersByTimeAsync(0);
    expect(seen).toEqual(['pending']);
    const reads = vi.spyOn(store, 'get').mockRejectedValue(new Error('connection closed'));
    watch.close();
    await vi.advanceTimersByTimeAsync(60_000);
    expect(reads).not.toHaveBeenCalled();
    expect(warn).not.toHaveBeenCalled();
    expect(vi.getTimerCount()).toBe(0);
    // A request that starts waiting after the close reads nothing either.
    watch.watch(store, 'q-2', (record) => seen.push(record.status));
    await vi.advanceTimersByTimeAsync(60_000);
    expect(reads).not.toHaveBeenCalled();
    expect(watch.size).toBe(0);
  });

  it('is what a gate reads its waiting requests’ records by: no KV watch, timer and poll of each', async () => {
    const bucket = new MemoryKv(HumanRequest);
    const watched: string[] = [];
    const kvWatch = bucket.watch.bind(bucket);
    bucket.watch = (key, onValue) => {
      watched.push(key);
      return kvWatch(key, onValue);
    };
    const clock = new SimulatedClock();
    const bus = new MemoryBus({ clock });
    const gate = new NatsHumanGate({
      bus,
      store: bucket,
      events: new EventFactory(clock),
      clock,
      logger,
      timeoutMs: 60_000,
    });
    const scope = (n: number) => ({
      pipeline: 'p',
      taskId: `task-${n}`,
      traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
      agent: 'workflow',
      stepId: `task-${n}.ask`,
    });
    const answers = [1, 2, 3].map((n) => gate.ask('Ship it?', scope(n), new AbortController().signal));
    await expect.poll(() => gate.pending).toBe(3);
    expect(watched).toEqual([]);
    // A decision written to a record while its message was lost is still taken.
    const key = (await bucket.keys()).find((k) => k.length > 0) as string;
    const entry = await bucket.get(key);
    await bucket.update(
      key,
      { ...(entry?.value as HumanRequest), status: 'answered', answer: 'yes' },
      entry?.revision ?? 0,
    );
    await expect(Promise.race(answers)).resolves.toBe('yes');
  });
});
