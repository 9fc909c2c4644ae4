import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { MemoryBus, SimulatedClock } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { EmbeddedNats } from '../../src/transport/embeddedNats.ts';
import {
  requestWithHeartbeats,
  startHeartbeatRequest,
  type TimeoutHold,
} from '../../src/transport/heartbeatRequest.ts';
import { NatsBus } from '../../src/transport/natsBus.ts';
import { TransportError } from '../../src/transport/transportError.ts';
import { captureLogger, type LogLine, startServer } from './natsFixture.ts';

const Reply = z.object({ done: z.literal(true) });
const Heartbeat = z.strictObject({ heartbeat: z.literal(true) });

/**
 * A responder in another process: heartbeats every 50 ms for each request, until the test publishes on
 * `troupe.test.release`; then the reply.
 */
const RESPONDER = `
const { connect } = require('@nats-io/transport-node');
connect({ servers: process.argv[1] }).then((nc) => {
  const working = new Set();
  nc.subscribe('troupe.test.slow', {
    callback: (_e, msg) => {
      const beat = setInterval(() => msg.respond(JSON.stringify({ heartbeat: true })), 50);
      working.add(() => { clearInterval(beat); msg.respond(JSON.stringify({ done: true })); });
    },
  });
  nc.subscribe('troupe.test.release', {
    callback: () => { for (const finish of working) finish(); working.clear(); },
  });
  nc.flush().then(() => console.log('ready'));
});
`;

describe('requestWithHeartbeats on a busy requester', () => {
  let server: EmbeddedNats;
  let bus: NatsBus;
  let responder: ChildProcess;
  let lines: LogLine[];

  beforeAll(async () => {
    server = await startServer();
    const captured = captureLogger('trace');
    lines = captured.lines;
    bus = await NatsBus.connect({ servers: server.url, name: 'busy-requester', logger: captured.logger });
    responder = spawn(process.execPath, ['-e', RESPONDER, server.url], {
      cwd: join(import.meta.dirname, '..', '..', '..', '..'),
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    await new Promise<void>((resolve) => responder.stdout?.on('data', () => resolve()));
  });
  afterAll(async () => {
    responder?.kill('SIGKILL');
    await bus?.close();
    await server?.stop();
  });

  it('reads the heartbeats that arrived while it was busy before calling the responder silent', async () => {
    let heard: () => void = () => {};
    const firstHeartbeat = new Promise<void>((resolve) => (heard = resolve));
    const pending = requestWithHeartbeats(bus, 'troupe.test.slow', {}, Reply, Heartbeat, {
      timeoutMs: 20_000,
      idleMs: 300,
      onHeartbeat: () => heard(),
    });
    await firstHeartbeat;
    // This thread is busy for longer than the idle limit; the responder's heartbeats wait in the socket. When the
    // thread is free, the overdue idle timer runs before they are read.
    const until = Date.now() + 800;
    while (Date.now() < until) {
      // busy on purpose
    }
    bus.connection.publish('troupe.test.release');
    await expect(pending).resolves.toEqual({ done: true });
  });

  it('logs the heartbeats at trace and the reply at the message level, from the responder to the workflow', async () => {
    lines.length = 0;
    const step = { taskId: 't-hb', from: 'workflow', to: 'planner', kind: 'agent.step' };
    const pending = requestWithHeartbeats(bus, 'troupe.test.slow', {}, Reply, Heartbeat, {
      timeoutMs: 20_000,
      idleMs: 1_000,
      meta: step,
    });
    const heard = () =>
      lines.filter((l) => l.dir === 'in' && l.taskId === 't-hb' && l.kind === 'step.heartbeat');
    await expect.poll(() => heard().length).toBeGreaterThan(5);
    bus.connection.publish('troupe.test.release');
    await pending;
    const received = lines.filter((l) => l.dir === 'in' && l.taskId === 't-hb');
    const heartbeats = received.filter((l) => l.kind === 'step.heartbeat');
    expect(heartbeats.length).toBeGreaterThan(5);
    expect(heartbeats.every((l) => l.level === 10 && l.from === 'planner' && l.to === 'workflow')).toBe(true);
    expect(received.filter((l) => l.kind !== 'step.heartbeat')).toEqual([
      expect.objectContaining({ level: 30, from: 'planner', to: 'workflow', kind: 'agent.reply' }),
    ]);
  });
});

/** A hold a test flips, as a task's steering is flipped by `troupe pause` and `troupe resume`. */
class HoldSwitch implements TimeoutHold {
  held = false;
  readonly #listeners = new Set<(held: boolean) => void>();
  set(held: boolean): void {
    this.held = held;
    for (const listener of this.#listeners) listener(held);
  }
  listen(listener: (held: boolean) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }
  get listening(): number {
    return this.#listeners.size;
  }
}

describe('requestWithHeartbeats held', () => {
  /** A responder on an in-memory bus that answers nothing until the test says so; its requests wait in `waiting`. */
  const setUp = () => {
    const clock = new SimulatedClock();
    const bus = new MemoryBus({ clock });
    const waiting: { respond: (value: unknown) => void }[] = [];
    bus.subscribeText('troupe.test.held', (delivery) => {
      waiting.push(delivery);
    });
    const hold = new HoldSwitch();
    let outcome: { value?: unknown; error?: unknown } | undefined;
    const request = (options: { timeoutMs?: number; idleMs?: number } = {}) => {
      requestWithHeartbeats(bus, 'troupe.test.held', {}, Reply, Heartbeat, {
        timeoutMs: options.timeoutMs ?? 10_000,
        idleMs: options.idleMs ?? 100 * 3_600_000,
        clock,
        hold,
      }).then(
        (value) => (outcome = { value }),
        (error: unknown) => (outcome = { error }),
      );
    };
    /** Moves the clock on by `ms`, and lets what the timers set going run. */
    const pass = async (ms: number) => {
      clock.advance(ms);
      for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
    };
    return { clock, bus, hold, waiting, request, pass, outcome: () => outcome };
  };

  it('does not count the time held against its timeout, and has what was left of it once let go', async () => {
    const { hold, request, pass, outcome } = setUp();
    request({ timeoutMs: 10_000 });
    await pass(4_000);
    hold.set(true);
    await pass(3_600_000);
    expect(outcome()).toBeUndefined();
    hold.set(false);
    // 6 s were left when it was held: not a fresh 10 s.
    await pass(5_900);
    expect(outcome()).toBeUndefined();
    await pass(200);
    expect(TransportError.is(outcome()?.error, 'timeout')).toBe(true);
  });

  it('held before it is sent, its time starts when it is let go; a reply while held is taken', async () => {
    const { hold, request, pass, outcome, waiting } = setUp();
    hold.set(true);
    request({ timeoutMs: 10_000 });
    await pass(60_000);
    expect(outcome()).toBeUndefined();
    waiting[0]?.respond({ done: true });
    await pass(0);
    expect(outcome()).toEqual({ value: { done: true } });
    expect(hold.listening).toBe(0);
  });

  it('still fails as stalled when its responder goes silent while held: heartbeats keep it alive as before', async () => {
    const { hold, request, pass, outcome, waiting } = setUp();
    request({ timeoutMs: 10_000, idleMs: 3_000 });
    await pass(0);
    hold.set(true);
    for (let beat = 0; beat < 20; beat++) {
      waiting[0]?.respond({ heartbeat: true });
      await pass(2_000);
    }
    expect(outcome()).toBeUndefined();
    await pass(3_100);
    await expect.poll(() => TransportError.is(outcome()?.error, 'stalled')).toBe(true);
    expect(hold.listening).toBe(0);
  });
});

describe('requestWithHeartbeats held and let go again and again', () => {
  const setUp = () => {
    const clock = new SimulatedClock();
    const bus = new MemoryBus({ clock });
    const waiting: { respond: (value: unknown) => void }[] = [];
    bus.subscribeText('troupe.test.cycles', (delivery) => {
      waiting.push(delivery);
    });
    const hold = new HoldSwitch();
    const outcomes: { value?: unknown; error?: unknown }[] = [];
    const request = (options: { timeoutMs?: number; signal?: AbortSignal } = {}) => {
      const at = outcomes.length;
      outcomes.push({});
      requestWithHeartbeats(bus, 'troupe.test.cycles', {}, Reply, Heartbeat, {
        timeoutMs: options.timeoutMs ?? 10_000,
        idleMs: 100 * 3_600_000,
        clock,
        hold,
        ...(options.signal ? { signal: options.signal } : {}),
      }).then(
        (value) => (outcomes[at] = { value }),
        (error: unknown) => (outcomes[at] = { error }),
      );
    };
    const pass = async (ms: number) => {
      clock.advance(ms);
      for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
    };
    return { clock, hold, waiting, request, pass, outcomes };
  };

  it('has exactly what was left after each hold, and fails at the last millisecond of it', async () => {
    const { hold, request, pass, outcomes } = setUp();
    request({ timeoutMs: 10_000 });
    // 2 s at a time between holds of an hour: 8 s spent over four stretches, 2 s left.
    for (let stretch = 0; stretch < 4; stretch++) {
      await pass(2_000);
      hold.set(true);
      await pass(3_600_000);
      // Held twice over: still one hold, not a second one taking the time again.
      hold.set(true);
      hold.set(false);
    }
    await pass(1_999);
    expect(outcomes[0]).toEqual({});
    await pass(1);
    expect(TransportError.is(outcomes[0]?.error, 'timeout')).toBe(true);
  });

  it('keeps one timer while it waits, for its timeout and its heartbeat watch both', async () => {
    const { clock, request, pass } = setUp();
    request({ timeoutMs: 10_000 });
    await pass(0);
    expect(clock.pending()).toHaveLength(1);
  });

  it('leaves no listener on the hold and no timer running once each request settled, however it ended', async () => {
    const { clock, hold, waiting, request, pass, outcomes } = setUp();
    const aborts: AbortController[] = [];
    for (let i = 0; i < 30; i++) {
      const abort = new AbortController();
      aborts.push(abort);
      request({ timeoutMs: 5_000, signal: abort.signal });
    }
    await pass(0);
    hold.set(true);
    hold.set(false);
    expect(hold.listening).toBe(30);
    // A third answered, a third aborted, a third run out of time.
    for (let i = 0; i < 10; i++) waiting[i]?.respond({ done: true });
    for (let i = 10; i < 20; i++) aborts[i]?.abort();
    await pass(0);
    await pass(5_000);
    expect(outcomes.filter((o) => 'value' in o)).toHaveLength(10);
    expect(outcomes.filter((o) => TransportError.is(o.error, 'aborted'))).toHaveLength(10);
    expect(outcomes.filter((o) => TransportError.is(o.error, 'timeout'))).toHaveLength(10);
    expect(hold.listening).toBe(0);
    expect(clock.pending()).toEqual([]);
  });
});

describe('startHeartbeatRequest', () => {
  /** A request on an in-memory bus whose responder answers only when the test says, and what its listener heard. */
  const setUp = (options: { timeoutMs?: number; idleMs?: number; held?: boolean } = {}) => {
    const clock = new SimulatedClock();
    const bus = new MemoryBus({ clock });
    const waiting: { respond: (value: unknown) => void }[] = [];
    bus.subscribeText('troupe.test.one', (delivery) => {
      waiting.push(delivery);
    });
    const heard: string[] = [];
    const request = startHeartbeatRequest(
      bus,
      'troupe.test.one',
      {},
      Reply,
      Heartbeat,
      { timeoutMs: options.timeoutMs ?? 10_000, idleMs: options.idleMs ?? 3_000, clock, held: options.held },
      {
        heartbeat: () => heard.push('heartbeat'),
        replied: () => heard.push('replied'),
        failed: (error) => heard.push(error.code),
      },
    );
    const pass = async (ms: number) => {
      clock.advance(ms);
      for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
    };
    return { clock, bus, waiting, heard, request, pass };
  };

  it('keeps one timer for its timeout and its heartbeat watch both; a heartbeat sets none', async () => {
    const { clock, waiting, heard, pass } = setUp({ timeoutMs: 10_000, idleMs: 3_000 });
    await pass(0);
    expect(clock.pending()).toEqual([3_000]);
    for (let beat = 0; beat < 4; beat++) {
      waiting[0]?.respond({ heartbeat: true });
      await pass(0);
      await pass(2_000);
      expect(clock.pending()).toHaveLength(1);
    }
    expect(heard).toEqual(['heartbeat', 'heartbeat', 'heartbeat', 'heartbeat']);
    // 8 s gone, and a heartbeat now: the timeout, 2 s on, comes before the silence allowed, 3 s on.
    waiting[0]?.respond({ heartbeat: true });
    await pass(0);
    await pass(1_999);
    expect(heard.slice(5)).toEqual([]);
    await pass(1);
    expect(heard.at(-1)).toBe('timeout');
    expect(clock.pending()).toEqual([]);
  });

  it('fails stalled when silent for idleMs after its last heartbeat, to the millisecond', async () => {
    const { clock, waiting, heard, pass } = setUp({ timeoutMs: 60_000, idleMs: 3_000 });
    await pass(1_000);
    waiting[0]?.respond({ heartbeat: true });
    await pass(0);
    await pass(2_999);
    expect(heard).toEqual(['heartbeat']);
    await pass(1);
    await expect.poll(() => heard.at(-1)).toBe('stalled');
    expect(clock.pending()).toEqual([]);
  });

  it('held from the start, its timeout does not run until let go; then it has all of it', async () => {
    const { heard, request, waiting, pass } = setUp({ timeoutMs: 5_000, idleMs: 3_600_000, held: true });
    await pass(60_000);
    expect(heard).toEqual([]);
    request.hold(false);
    await pass(4_999);
    expect(heard).toEqual([]);
    await pass(1);
    expect(heard).toEqual(['timeout']);
    waiting[0]?.respond({ done: true });
    await pass(0);
    expect(heard).toEqual(['timeout']);
  });

  it('cancelled, leaves no timer and no inbox, and its listener hears nothing more', async () => {
    const { bus, clock, heard, request, waiting, pass } = setUp();
    await pass(0);
    const inbox = (waiting[0] as { reply?: string }).reply as string;
    expect(bus.hasListener(inbox)).toBe(true);
    request.cancel();
    expect(clock.pending()).toEqual([]);
    expect(bus.hasListener(inbox)).toBe(false);
    waiting[0]?.respond({ done: true });
    await pass(60_000);
    expect(heard).toEqual([]);
  });

  it('tells a failure to send once it has returned, not from within the call', async () => {
    const clock = new SimulatedClock();
    const bus = new MemoryBus({ clock });
    await bus.close();
    const heard: string[] = [];
    startHeartbeatRequest(
      bus,
      'troupe.test.closed',
      {},
      Reply,
      Heartbeat,
      { timeoutMs: 1_000, idleMs: 1_000, clock },
      {
        heartbeat: () => {},
        replied: () => heard.push('replied'),
        failed: (error) => heard.push(error.code),
      },
    );
    expect(heard).toEqual([]);
    await Promise.resolve();
    expect(heard).toEqual(['closed']);
    expect(clock.pending()).toEqual([]);
  });
});
