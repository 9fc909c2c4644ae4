import { SimulatedClock } from '@troupe/testkit';
import { describe, expect, it } from 'vitest';
import type { Bus, Listening } from '../../src/transport/bus.ts';
import { InlineHeartbeatSender } from '../../src/transport/heartbeatSender.ts';

/** A bus whose heartbeats find, in turn, what `found` says. */
const busFinding = (...found: Listening[]) =>
  ({ stillListening: async () => found.shift() ?? 'unanswered' }) as unknown as Bus;

/** The listening reports for one inbox over `beats` heartbeats, one interval apart. */
async function reportsOver(bus: Bus, beats: number): Promise<boolean[]> {
  const clock = new SimulatedClock();
  const sender = new InlineHeartbeatSender(bus, clock);
  const reports: boolean[] = [];
  sender.onListening((_step, _inbox, listening) => reports.push(listening));
  sender.beat('t.s.1', ['inbox.a'], 1_000, { stepId: 't.s.1', heartbeat: true });
  for (let beat = 1; beat < beats; beat += 1) {
    await expect.poll(() => reports.length).toBe(beat);
    clock.advance(1_000);
  }
  await expect.poll(() => reports.length).toBe(beats);
  sender.stop('t.s.1');
  return reports;
}

describe('heartbeats and whether their requester is still there', () => {
  it('takes silence from a requester that acknowledged heartbeats before for its being gone', async () => {
    // Across NATS accounts, a requester that went away is silence, not "no responders".
    expect(await reportsOver(busFinding('answered', 'answered', 'unanswered'), 3)).toEqual([
      true,
      true,
      false,
    ]);
  });

  it('takes silence from a requester that never acknowledges for nothing, and "no responders" for gone', async () => {
    expect(await reportsOver(busFinding('unanswered', 'unanswered', 'gone'), 3)).toEqual([true, true, false]);
  });
});
