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

describe('the first heartbeat of a step', () => {
  /** A bus that counts the heartbeats sent. */
  const counting = () => {
    const sent: unknown[] = [];
    const bus = {
      stillListening: async (_inbox: string, heartbeat: unknown) => {
        sent.push(heartbeat);
        return 'answered';
      },
    } as unknown as Bus;
    return { bus, sent };
  };

  it('goes after firstAfterMs, not at once; a step stopped before then sends none', () => {
    const clock = new SimulatedClock();
    const { bus, sent } = counting();
    const sender = new InlineHeartbeatSender(bus, clock);
    sender.beat('t.quick.1', ['inbox.a'], 5_000, { stepId: 't.quick.1', heartbeat: true }, 250);
    sender.beat('t.long.1', ['inbox.b'], 5_000, { stepId: 't.long.1', heartbeat: true }, 250);
    clock.advance(249);
    sender.stop('t.quick.1');
    expect(sent).toEqual([]);
    clock.advance(1);
    expect(sent).toEqual([{ stepId: 't.long.1', heartbeat: true }]);
    clock.advance(4_750);
    expect(sent).toHaveLength(2);
    sender.stop('t.long.1');
    expect(clock.pending()).toEqual([]);
  });

  it('goes at once when what it says changes before then, and not again at firstAfterMs', () => {
    const clock = new SimulatedClock();
    const { bus, sent } = counting();
    const sender = new InlineHeartbeatSender(bus, clock);
    sender.beat('t.ask.1', ['inbox.a'], 5_000, { stepId: 't.ask.1', heartbeat: true }, 250);
    clock.advance(10);
    const waiting = {
      stepId: 't.ask.1',
      heartbeat: true,
      waitingFor: { kind: 'approval', id: 'ap-1' },
    } as const;
    sender.beat('t.ask.1', ['inbox.a'], 5_000, waiting);
    expect(sent).toEqual([waiting]);
    clock.advance(4_989);
    expect(sent).toHaveLength(1);
    sender.stop('t.ask.1');
  });
});
