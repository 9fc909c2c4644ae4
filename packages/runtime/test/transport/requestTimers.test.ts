import { MAX_TIMER_MS } from '@troupe/protocol';
import { MemoryBus, SimulatedClock } from '@troupe/testkit';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { startHeartbeatRequest } from '../../src/transport/heartbeatRequest.ts';
import { RequestTimers, type TimedRequest } from '../../src/transport/requestTimers.ts';

/** A request that notes when it was woken, and may ask to be woken again. */
function timed(name: string, woken: string[], clock: SimulatedClock, again?: () => void): TimedRequest {
  return {
    at: Number.POSITIVE_INFINITY,
    slot: -1,
    order: 0,
    due: () => {
      woken.push(`${name}@${clock.now()}`);
      again?.();
    },
  };
}

describe('the timers of many requests on one timer of their clock', () => {
  it('wakes each at its time, in order, on one clock timer, and leaves none once none waits', () => {
    const clock = new SimulatedClock(0);
    const timers = new RequestTimers(clock);
    const woken: string[] = [];
    const times = [50, 10, 40, 15, 30, 70, 20, 60];
    const requests = times.map((at, i) => {
      const request = timed(`r${i}`, woken, clock);
      timers.set(request, at);
      return request;
    });
    expect(clock.pending()).toEqual([10]);
    // One taken out, one moved later and one sooner: the queue follows.
    timers.clear(requests[2] as TimedRequest);
    timers.set(requests[0] as TimedRequest, 80);
    timers.set(requests[5] as TimedRequest, 5);
    expect(clock.pending()).toEqual([5]);
    clock.advance(100);
    expect(woken).toEqual(['r5@5', 'r1@10', 'r3@15', 'r6@20', 'r4@30', 'r7@60', 'r0@80']);
    expect(timers.size).toBe(0);
    expect(clock.pending()).toEqual([]);
  });

  it('wakes a request that asks again at its next time, and one cleared never', () => {
    const clock = new SimulatedClock(0);
    const timers = new RequestTimers(clock);
    const woken: string[] = [];
    let beats = 0;
    const beating: TimedRequest = timed('beat', woken, clock, () => {
      beats += 1;
      if (beats < 3) timers.set(beating, clock.now() + 10);
    });
    const cleared = timed('cleared', woken, clock);
    timers.set(beating, 10);
    timers.set(cleared, 25);
    timers.clear(cleared);
    clock.advance(100);
    expect(woken).toEqual(['beat@10', 'beat@20', 'beat@30']);
    expect(clock.pending()).toEqual([]);
  });

  it('wakes requests due at one time in the order their times were set', () => {
    const clock = new SimulatedClock(0);
    const timers = new RequestTimers(clock);
    const woken: string[] = [];
    for (const name of ['a', 'b', 'c', 'd', 'e', 'f', 'g']) timers.set(timed(name, woken, clock), 10);
    clock.advance(10);
    expect(woken).toEqual(['a@10', 'b@10', 'c@10', 'd@10', 'e@10', 'f@10', 'g@10']);
  });

  it('wakes the others due, and keeps the queue going, when one throws; its error is thrown after them', () => {
    const clock = new SimulatedClock(0);
    const timers = new RequestTimers(clock);
    const woken: string[] = [];
    const throwing: TimedRequest = {
      at: Number.POSITIVE_INFINITY,
      slot: -1,
      order: 0,
      due: () => {
        throw new Error('a listener that throws');
      },
    };
    timers.set(throwing, 10);
    timers.set(timed('b', woken, clock), 10);
    timers.set(timed('c', woken, clock), 50);
    expect(() => clock.advance(10)).toThrow('a listener that throws');
    expect(woken).toEqual(['b@10']);
    clock.advance(100);
    expect(woken).toEqual(['b@10', 'c@50']);
    expect(timers.size).toBe(0);
  });

  it('sets its clock timer for no longer than a timer holds, however far off the soonest request is', () => {
    const clock = new SimulatedClock(0);
    const timers = new RequestTimers(clock);
    const woken: string[] = [];
    timers.set(timed('far', woken, clock), 3 * MAX_TIMER_MS);
    expect(clock.pending()).toEqual([MAX_TIMER_MS]);
    clock.advance(MAX_TIMER_MS);
    expect(woken).toEqual([]);
    // Set again for the longest, not for 1 ms: the request is still twice that far off.
    expect(clock.pending()).toEqual([MAX_TIMER_MS]);
    clock.advance(2 * MAX_TIMER_MS);
    expect(woken).toEqual([`far@${3 * MAX_TIMER_MS}`]);
  });

  it("keeps one clock timer for a hundred step requests' timeouts and heartbeat watches", () => {
    const clock = new SimulatedClock();
    const bus = new MemoryBus({ clock });
    bus.subscribeText('troupe.test.many', () => {});
    const failed: string[] = [];
    const requests = Array.from({ length: 100 }, (_, n) =>
      startHeartbeatRequest(
        bus,
        'troupe.test.many',
        {},
        z.object({}),
        z.object({}),
        { timeoutMs: 1_000 + n, idleMs: 3_600_000, clock },
        { heartbeat: () => {}, replied: () => {}, failed: (error) => failed.push(error.code) },
      ),
    );
    expect(clock.pending()).toEqual([1_000]);
    for (const request of requests.slice(50)) request.cancel();
    clock.advance(2_000);
    expect(failed).toEqual(Array.from({ length: 50 }, () => 'timeout'));
    expect(clock.pending()).toEqual([]);
  });
});
