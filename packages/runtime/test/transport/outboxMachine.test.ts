import { SimulatedClock } from '@troupe/testkit';
import { describe, expect, it } from 'vitest';
import { createActor } from 'xstate';
import { type OutboxMachineInput, outboxMachine, RECHECK_MS } from '../../src/transport/outboxMachine.ts';

/** The outbox's lifecycle on a simulated clock, with probes the test answers and what it was told recorded. */
function start(overrides: Partial<OutboxMachineInput> = {}) {
  const clock = new SimulatedClock();
  let pending = true;
  const probes: { resolve: () => void; reject: (error: unknown) => void }[] = [];
  const told: string[] = [];
  const actor = createActor(outboxMachine, {
    clock,
    input: {
      retryDelayMs: 100,
      maxRetryDelayMs: 1_000,
      probe: () => new Promise((resolve, reject) => probes.push({ resolve: () => resolve({}), reject })),
      unstoredReason: (error) =>
        (error as Error).message === 'no stream' ? 'the stream does not exist' : undefined,
      onUnstored: (why) => told.push(`unstored: ${why}`),
      onBackoff: (_error, delayMs) => told.push(`backoff ${delayMs}`),
      onRecovered: () => told.push('recovered'),
      // The middle of the jitter: every wait is exactly its base.
      random: () => 0.5,
      hasPending: () => pending,
      ...overrides,
    },
  });
  actor.start();
  const state = () => actor.getSnapshot().value;
  /** Lets a probe's answer reach the actor. */
  const settle = () => new Promise((resolve) => setImmediate(resolve));
  return {
    clock,
    actor,
    probes,
    told,
    state,
    settle,
    setPending: (now: boolean) => {
      pending = now;
    },
  };
}

describe('the event outbox lifecycle', () => {
  it('waits idle until there is an event, then probes and streams once the stream is found', async () => {
    const { actor, probes, state, settle } = start();
    expect(state()).toBe('idle');
    expect(probes).toHaveLength(0);
    actor.send({ type: 'pending' });
    expect(state()).toBe('probing');
    probes[0]?.resolve();
    await settle();
    expect(state()).toBe('streaming');
  });

  it('backs off after a failed send, doubling the wait up to its bound, and starts over once an event is stored', async () => {
    const { clock, actor, probes, told, state, settle } = start();
    actor.send({ type: 'pending' });
    probes[0]?.resolve();
    await settle();
    for (const wait of [100, 200, 400, 800, 1_000, 1_000]) {
      actor.send({ type: 'sendFailed', error: new Error('no ack'), probe: false });
      expect(state()).toBe('backingOff');
      clock.advance(wait - 1);
      expect(state()).toBe('backingOff');
      clock.advance(1);
      expect(state()).toBe('streaming');
    }
    expect(told).toEqual([
      'backoff 100',
      'backoff 200',
      'backoff 400',
      'backoff 800',
      'backoff 1000',
      'backoff 1000',
    ]);
    actor.send({ type: 'stored' });
    expect(told.at(-1)).toBe('recovered');
    actor.send({ type: 'sendFailed', error: new Error('no ack'), probe: false });
    expect(told.at(-1)).toBe('backoff 100');
  });

  it('probes again after the wait when the failure asked for it', async () => {
    const { clock, actor, probes, state, settle } = start();
    actor.send({ type: 'pending' });
    probes[0]?.resolve();
    await settle();
    actor.send({ type: 'sendFailed', error: new Error('timed out'), probe: true });
    clock.advance(100);
    expect(state()).toBe('probing');
    expect(probes).toHaveLength(2);
  });

  it('sends plainly when no stream stores events, says so once, and looks for the stream again', async () => {
    const { clock, actor, probes, told, state, settle } = start();
    actor.send({ type: 'pending' });
    probes[0]?.reject(new Error('no stream'));
    await settle();
    expect(state()).toBe('plain');
    clock.advance(RECHECK_MS);
    expect(state()).toBe('probing');
    probes[1]?.reject(new Error('no stream'));
    await settle();
    expect(state()).toBe('plain');
    expect(told).toEqual(['unstored: the stream does not exist']);
  });

  it('backs off and probes again when the probe fails for a passing reason', async () => {
    const { clock, actor, probes, state, settle } = start();
    actor.send({ type: 'pending' });
    probes[0]?.reject(new Error('timed out'));
    await settle();
    expect(state()).toBe('backingOff');
    clock.advance(100);
    expect(state()).toBe('probing');
  });

  it('holds events while disconnected; a reconnect resumes streaming, or probes first after plain sending', async () => {
    const { actor, probes, state, settle } = start();
    actor.send({ type: 'pending' });
    probes[0]?.resolve();
    await settle();
    actor.send({ type: 'disconnect' });
    expect(state()).toBe('disconnected');
    actor.send({ type: 'reconnect' });
    expect(state()).toBe('streaming');

    const plain = start();
    plain.actor.send({ type: 'pending' });
    plain.probes[0]?.reject(new Error('no stream'));
    await plain.settle();
    plain.actor.send({ type: 'disconnect' });
    plain.actor.send({ type: 'reconnect' });
    expect(plain.state()).toBe('probing');
  });

  it('resumes at once on a reconnect while backing off', async () => {
    const { actor, probes, state, settle } = start();
    actor.send({ type: 'pending' });
    probes[0]?.resolve();
    await settle();
    actor.send({ type: 'sendFailed', error: new Error('no ack'), probe: false });
    actor.send({ type: 'reconnect' });
    expect(state()).toBe('streaming');
  });

  it('asks again on a reconnect while probing: the probe in flight belongs to the old connection', async () => {
    const { actor, probes, state, settle } = start();
    actor.send({ type: 'pending' });
    actor.send({ type: 'reconnect' });
    expect(probes).toHaveLength(2);
    probes[0]?.reject(new Error('no stream'));
    await settle();
    expect(state()).toBe('probing');
    probes[1]?.resolve();
    await settle();
    expect(state()).toBe('streaming');
  });

  it('goes idle after a backoff with nothing left to send, and probes again for the next event', async () => {
    const { clock, actor, probes, told, state, settle, setPending } = start();
    actor.send({ type: 'pending' });
    probes[0]?.reject(new Error('timed out'));
    await settle();
    setPending(false);
    clock.advance(100);
    expect(state()).toBe('idle');
    clock.advance(60_000);
    expect(probes).toHaveLength(1);
    expect(told).toEqual(['backoff 100']);
    setPending(true);
    actor.send({ type: 'pending' });
    expect(state()).toBe('probing');
  });

  it('stops for good, with no timer left', async () => {
    const { clock, actor, probes, state, settle } = start();
    actor.send({ type: 'pending' });
    probes[0]?.resolve();
    await settle();
    actor.send({ type: 'sendFailed', error: new Error('no ack'), probe: false });
    actor.send({ type: 'stop' });
    expect(state()).toBe('stopped');
    expect(actor.getSnapshot().status).toBe('done');
    expect(clock.pending()).toEqual([]);
  });
});
