import type { MemoryBus, SimulatedClock } from '@troupe/testkit';

/** Lets test time pass on `clock`, in moves of `stepMs`, the bus settling between them and after the last. */
export const timePasser =
  (bus: MemoryBus, clock: SimulatedClock) =>
  async (ms: number, stepMs = 100): Promise<void> => {
    for (let passed = 0; passed < ms; passed += stepMs) {
      await bus.settled();
      clock.advance(Math.min(stepMs, ms - passed));
    }
    await bus.settled();
  };
