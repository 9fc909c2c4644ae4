import { describe, expect, it } from 'vitest';
import { SimulatedClock } from '../src/simulatedClock.ts';

describe('SimulatedClock', () => {
  it('runs timers only as time is advanced, in due order, each at its own time', () => {
    const clock = new SimulatedClock(1_000);
    const ran: [string, number][] = [];
    clock.setTimeout(() => ran.push(['b', clock.now()]), 200);
    clock.setTimeout(() => ran.push(['a', clock.now()]), 100);
    clock.setTimeout(() => ran.push(['a2', clock.now()]), 100);
    expect(clock.pending()).toEqual([100, 100, 200]);
    clock.advance(99);
    expect(ran).toEqual([]);
    clock.advance(150);
    expect(ran).toEqual([
      ['a', 1_100],
      ['a2', 1_100],
      ['b', 1_200],
    ]);
    expect(clock.now()).toBe(1_249);
  });

  it('runs a timer set by a timer when it falls due within the same advance, and not one cleared', () => {
    const clock = new SimulatedClock(0);
    const ran: number[] = [];
    const tick = () => {
      ran.push(clock.now());
      clock.setTimeout(tick, 50);
    };
    clock.setTimeout(tick, 50);
    const cleared = clock.setTimeout(() => ran.push(-1), 120);
    clock.clearTimeout(cleared);
    clock.advance(175);
    expect(ran).toEqual([50, 100, 150]);
    expect(clock.pending()).toEqual([25]);
  });
});
