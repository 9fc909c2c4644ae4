import type { StatusListener } from '@troupe/runtime';
import { captureLogger } from '@troupe/testkit';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { STOP_OUTAGE_WAIT_MS, stopWithin } from '../src/stopWithin.ts';

/** A connection whose reachability a test sets, telling its listeners as NatsBus does. */
function fakeBus(reachable: boolean) {
  const listeners = new Set<StatusListener>();
  const bus = {
    reachable,
    onStatus(listener: StatusListener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    set(up: boolean) {
      bus.reachable = up;
      for (const listener of listeners) listener({ type: up ? 'reconnect' : 'disconnect' });
    },
    listening: () => listeners.size,
  };
  return bus;
}

const never = () => new Promise<void>(() => {});
const after = (ms: number) => () => new Promise<void>((resolve) => setTimeout(resolve, ms));

describe('stopWithin', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('gives up once NATS has been unreachable for the outage wait, long before its time is up', async () => {
    const { logger } = captureLogger();
    const bus = fakeBus(false);
    const outcome = stopWithin('the coordinator', never, 20_000, { logger, bus });
    await vi.advanceTimersByTimeAsync(STOP_OUTAGE_WAIT_MS);
    await expect(outcome).resolves.toBe('unreachable');
    expect(bus.listening()).toBe(0);
  });

  it('waits on when NATS comes back within the outage wait, and the part finishes', async () => {
    const { logger } = captureLogger();
    const bus = fakeBus(false);
    const outcome = stopWithin('the coordinator', after(STOP_OUTAGE_WAIT_MS + 2_000), 20_000, {
      logger,
      bus,
    });
    await vi.advanceTimersByTimeAsync(STOP_OUTAGE_WAIT_MS - 1_000);
    bus.set(true);
    await vi.advanceTimersByTimeAsync(3_000);
    await expect(outcome).resolves.toBe('stopped');
  });

  it('counts the outage wait from the last loss: a connection lost again starts it over', async () => {
    const { logger } = captureLogger();
    const bus = fakeBus(true);
    let settled: string | undefined;
    void stopWithin('the coordinator', never, 20_000, { logger, bus }).then((o) => (settled = o));
    bus.set(false);
    await vi.advanceTimersByTimeAsync(STOP_OUTAGE_WAIT_MS - 1_000);
    bus.set(true);
    bus.set(false);
    await vi.advanceTimersByTimeAsync(STOP_OUTAGE_WAIT_MS - 1_000);
    expect(settled).toBeUndefined();
    await vi.advanceTimersByTimeAsync(1_000);
    expect(settled).toBe('unreachable');
  });

  it('ends at its time with NATS up, and says a failure without throwing', async () => {
    const { logger, lines } = captureLogger();
    const bus = fakeBus(true);
    const slow = stopWithin('the agents', never, 1_000, { logger, bus });
    await vi.advanceTimersByTimeAsync(1_000);
    await expect(slow).resolves.toBe('timeout');
    const failing = stopWithin('the agents', () => Promise.reject(new Error('closed connection')), 1_000, {
      logger,
    });
    await expect(failing).resolves.toBe('failed');
    expect(lines.map((l) => l.msg)).toContain(
      'stopping the agents failed: closed connection; going on with the stop',
    );
  });
});
