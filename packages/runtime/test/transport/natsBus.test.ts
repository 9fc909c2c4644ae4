import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { ErrorReply, InvalidMessageEvent, subjects, type TroupeEvent } from '@troupe/protocol';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { Delivery } from '../../src/transport/bus.ts';
import type { EmbeddedNats } from '../../src/transport/embeddedNats.ts';
import { findFreePort, startNatsServer } from '../../src/transport/embeddedNats.ts';
import { NatsBus } from '../../src/transport/natsBus.ts';
import { TransportError } from '../../src/transport/transportError.ts';
import { captureLogger, eventually, type LogLine, startServer } from './natsFixture.ts';

const Ping = z.strictObject({ taskId: z.string(), n: z.number().int() });
type Ping = z.infer<typeof Ping>;
const Pong = z.object({ ok: z.literal(true), n: z.number() });

let server: EmbeddedNats;
let bus: NatsBus;
let lines: LogLine[];
const extraBuses: NatsBus[] = [];

beforeAll(async () => {
  server = await startServer();
  const captured = captureLogger();
  lines = captured.lines;
  bus = await NatsBus.connect({ servers: server.url, name: 'bus-test', logger: captured.logger });
});

afterEach(() => {
  lines.length = 0;
});

afterAll(async () => {
  for (const other of extraBuses) await other.close();
  await bus?.close();
  await server?.stop();
});

async function otherBus(name: string): Promise<NatsBus> {
  const other = await NatsBus.connect({ servers: server.url, name, logger: captureLogger().logger });
  extraBuses.push(other);
  return other;
}

function collect<T>(subject: string, schema: z.ZodType<T>, into: T[]): void {
  bus.subscribe(subject, schema, (d) => void into.push(d.value), { reporter: 'test' });
}

describe('NatsBus publish and subscribe', () => {
  it('delivers a valid message with its subject and headers, and logs one line each way', async () => {
    const got: Delivery<Ping>[] = [];
    const sub = bus.subscribe('troupe.test.roundtrip', Ping, (d) => void got.push(d), { reporter: 'test' });
    await bus.flush();

    bus.publish(
      'troupe.test.roundtrip',
      { taskId: 't1', n: 1 },
      { taskId: 't1', kind: 'ping' },
      { 'x-test': 'yes' },
    );
    await eventually(() => got.length === 1);

    expect(got[0]).toMatchObject({ subject: 'troupe.test.roundtrip', value: { taskId: 't1', n: 1 } });
    expect(got[0]?.headers).toEqual({ 'x-test': 'yes' });
    expect(got[0]?.reply).toBeUndefined();
    const messageLines = lines.filter((l) => l.subject === 'troupe.test.roundtrip');
    expect(messageLines.map((l) => [l.dir, l.msg])).toEqual([
      ['out', '→ troupe.test.roundtrip'],
      ['in', '← troupe.test.roundtrip'],
    ]);
    expect(messageLines[0]).toMatchObject({ taskId: 't1', kind: 'ping' });
    // The receiving side reads taskId from the payload when no meta function is given.
    expect(messageLines[1]).toMatchObject({ taskId: 't1' });
    sub.unsubscribe();
    await sub.closed;
  });

  it('publishes an event on its subject with traceparent and Nats-Msg-Id headers', async () => {
    const got: Delivery<unknown>[] = [];
    bus.subscribe(subjects.taskEvents('t-ev', 'demo'), z.unknown(), (d) => void got.push(d));
    await bus.flush();
    const event: TroupeEvent = {
      id: 'ev-1',
      ts: new Date(0).toISOString(),
      pipeline: 'demo',
      taskId: 't-ev',
      kind: 'task.accepted',
      traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
      data: { goal: 'say hi' },
    };

    bus.publishEvent(event);
    await eventually(() => got.length === 1);

    expect(got[0]?.subject).toBe('troupe.events.demo.t-ev.task.accepted');
    expect(got[0]?.value).toEqual(event);
    expect(got[0]?.headers).toMatchObject({ traceparent: event.traceparent, 'Nats-Msg-Id': 'ev-1' });
    const out = lines.find((l) => l.dir === 'out' && l.subject === 'troupe.events.demo.t-ev.task.accepted');
    expect(out).toMatchObject({
      msg: '→ troupe.events.demo.t-ev.task.accepted',
      taskId: 't-ev',
      kind: 'task.accepted',
    });
  });
});

describe('NatsBus with invalid messages', () => {
  const reports: InvalidMessageEvent[] = [];
  const delivered: Ping[] = [];

  beforeAll(async () => {
    collect(subjects.invalid, InvalidMessageEvent, reports);
    collect('troupe.tasks.demo', Ping, delivered);
    await bus.flush();
  });

  it('reports a payload that is not JSON and keeps delivering', async () => {
    const sender = await otherBus('raw-sender');
    sender.connection.publish('troupe.tasks.demo', '{not json');
    sender.publish('troupe.tasks.demo', { taskId: 'after-bad-json', n: 2 });

    await eventually(() => reports.length === 1 && delivered.length === 1);
    expect(reports[0]).toMatchObject({
      kind: 'message.invalid',
      subject: 'troupe.tasks.demo',
      reporter: 'test',
      payload: '{not json',
      pipeline: 'demo',
      issues: [],
    });
    expect(reports[0]?.reason).toMatch(/^payload is not JSON/);
    expect(reports[0]?.id).not.toBe('');
    expect(Number.isNaN(Date.parse(reports[0]?.ts ?? ''))).toBe(false);
    expect(delivered[0]).toEqual({ taskId: 'after-bad-json', n: 2 });
  });

  it('reports a payload that fails the schema, with its issues, and keeps delivering', async () => {
    reports.length = 0;
    delivered.length = 0;
    bus.publish('troupe.tasks.demo', { taskId: 't2', n: 'two', extra: true });
    bus.publish('troupe.tasks.demo', { taskId: 't3', n: 3 });

    await eventually(() => reports.length === 1 && delivered.length === 1);
    const report = reports[0];
    expect(report?.reason).toMatch(/^payload failed validation/);
    expect(report?.issues.map((i) => i.path)).toContain('n');
    expect(report?.issues.length).toBeGreaterThanOrEqual(2);
    expect(JSON.parse(report?.payload ?? '')).toEqual({ taskId: 't2', n: 'two', extra: true });
    expect(delivered).toEqual([{ taskId: 't3', n: 3 }]);
    expect(
      lines.some((l) => l.level === 40 && String(l.msg).startsWith('invalid message on troupe.tasks.demo')),
    ).toBe(true);
  });

  it('logs a refused message once, as a warning with the reason, instead of its in line', async () => {
    reports.length = 0;
    delivered.length = 0;
    bus.publish('troupe.tasks.demo', { taskId: 't-bad', n: 'one' });
    bus.publish('troupe.tasks.demo', { taskId: 't-good', n: 1 });
    await eventually(() => reports.length === 1 && delivered.length === 1);
    const received = lines.filter((l) => l.dir === 'in' && l.subject === 'troupe.tasks.demo');
    expect(received.map((l) => [l.level, l.taskId])).toEqual([
      [40, undefined],
      [30, 't-good'],
    ]);
    expect(received[0]).toMatchObject({
      reporter: 'test',
      reason: expect.stringMatching(/^payload failed validation/),
    });
  });

  it('quotes at most 2000 characters of a bad payload and takes ids from an event subject', async () => {
    reports.length = 0;
    collect('troupe.events.demo.t-big.step.started', Ping, []);
    await bus.flush();
    bus.publish('troupe.events.demo.t-big.step.started', { blob: 'x'.repeat(5_000) });

    await eventually(() => reports.length === 1);
    expect(reports[0]?.payload).toHaveLength(2_000);
    expect(reports[0]).toMatchObject({ pipeline: 'demo', taskId: 't-big' });
  });

  it('does not report a report: an events subscriber seeing troupe.events._invalid stays quiet', async () => {
    reports.length = 0;
    const events: unknown[] = [];
    bus.subscribe(
      subjects.allEvents,
      z.object({ traceparent: z.string() }),
      (d) => void events.push(d.value),
    );
    await bus.flush();
    bus.publish('troupe.tasks.demo', { wrong: true });

    await eventually(() => reports.length >= 1);
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(reports).toHaveLength(1);
  });

  it('answers a request whose payload is invalid with an ErrorReply instead of reporting it', async () => {
    reports.length = 0;
    bus.subscribe('troupe.test.service', Ping, (d) => d.respond({ ok: true, n: d.value.n }), {
      reporter: 'svc',
    });
    await bus.flush();

    const raw = await bus.connection.request('troupe.test.service', JSON.stringify({ n: 'x' }), {
      timeout: 2_000,
    });
    const reply = ErrorReply.parse(raw.json());
    expect(reply.error.code).toBe('invalid_message');
    expect(reply.error.message).toMatch(/payload failed validation: .*taskId/);

    const failure = await bus
      .request('troupe.test.service', { n: 1 }, Pong, { timeoutMs: 2_000 })
      .catch((e) => e);
    expect(failure).toBeInstanceOf(TransportError);
    expect(failure).toMatchObject({ code: 'invalid_message' });

    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(reports).toHaveLength(0);
  });
});

describe('NatsBus handlers that fail', () => {
  it('survives a handler that throws, synchronously or not', async () => {
    const seen: number[] = [];
    bus.subscribe(
      'troupe.test.throws',
      Ping,
      async (d) => {
        seen.push(d.value.n);
        if (d.value.n === 1) throw new Error('sync-ish boom');
        if (d.value.n === 2) await Promise.reject(new Error('async boom'));
      },
      { reporter: 'test' },
    );
    bus.subscribe('troupe.test.throws-sync', Ping, (d) => {
      seen.push(d.value.n * 10);
      throw new Error('plain boom');
    });
    await bus.flush();

    bus.publish('troupe.test.throws', { taskId: 't', n: 1 });
    bus.publish('troupe.test.throws', { taskId: 't', n: 2 });
    bus.publish('troupe.test.throws-sync', { taskId: 't', n: 3 });
    bus.publish('troupe.test.throws', { taskId: 't', n: 4 });

    await eventually(() => seen.length === 4);
    expect(seen.sort((a, b) => a - b)).toEqual([1, 2, 4, 30]);
    const errors = lines.filter((l) => l.level === 50).map((l) => l.msg);
    expect(errors).toEqual(
      expect.arrayContaining([
        'handler for troupe.test.throws failed: sync-ish boom',
        'handler for troupe.test.throws failed: async boom',
        'handler for troupe.test.throws-sync failed: plain boom',
      ]),
    );
  });

  it('answers a request whose handler throws with handler_failed', async () => {
    bus.subscribe('troupe.test.failing-service', Ping, () => {
      throw new Error('no capacity');
    });
    await bus.flush();

    const failure = await bus
      .request('troupe.test.failing-service', { taskId: 't', n: 1 }, Pong, { timeoutMs: 2_000 })
      .catch((e) => e);
    expect(failure).toMatchObject({ name: 'TransportError', code: 'handler_failed' });
    expect(failure.message).toContain('no capacity');
  });
});

describe('NatsBus requests', () => {
  beforeAll(async () => {
    bus.subscribe('troupe.test.echo', Ping, (d) => d.respond({ ok: true, n: d.value.n * 2 }));
    bus.subscribe('troupe.test.liar', Ping, (d) => d.respond({ nonsense: true }));
    bus.subscribe('troupe.test.silent', Ping, () => {});
    await bus.flush();
  });

  it('returns the validated reply', async () => {
    const reply = await bus.request('troupe.test.echo', { taskId: 't', n: 21 }, Pong, {
      timeoutMs: 2_000,
      meta: { taskId: 't' },
    });
    expect(reply).toEqual({ ok: true, n: 42 });
  });

  it('logs a reply from the responder to the requester, with a reply kind, on both sides', async () => {
    const step = { taskId: 't', from: 'workflow', to: 'planner', kind: 'agent.step' };
    bus.subscribe('troupe.agents.demo.planner', Ping, (d) => d.respond({ ok: true, n: d.value.n }), {
      meta: () => step,
    });
    await bus.flush();
    await bus.request('troupe.agents.demo.planner', { taskId: 't', n: 1 }, Pong, {
      timeoutMs: 2_000,
      meta: step,
    });
    const route = (l: LogLine) => `${l.dir} ${String(l.from)}>${String(l.to)} ${String(l.kind)}`;
    expect(lines.filter((l) => l.taskId === 't' && l.dir !== undefined).map(route)).toEqual([
      'out workflow>planner agent.step',
      'in workflow>planner agent.step',
      'out planner>workflow agent.reply',
      'in planner>workflow agent.reply',
    ]);
  });

  it('fails with no_responders when no one serves the subject', async () => {
    const failure = await bus
      .request('troupe.agents.demo.nobody', {}, Pong, { timeoutMs: 2_000 })
      .catch((e) => e);
    expect(failure).toBeInstanceOf(TransportError);
    expect(failure).toMatchObject({
      code: 'no_responders',
      message: 'no one is serving troupe.agents.demo.nobody',
    });
  });

  it('fails with timeout when the responder stays silent', async () => {
    const failure = await bus
      .request('troupe.test.silent', { taskId: 't', n: 1 }, Pong, { timeoutMs: 200 })
      .catch((e) => e);
    expect(failure).toMatchObject({
      code: 'timeout',
      message: 'no reply from troupe.test.silent within 200 ms',
    });
  });

  it('fails with invalid_reply when the reply does not match the schema', async () => {
    const failure = await bus
      .request('troupe.test.liar', { taskId: 't', n: 1 }, Pong, { timeoutMs: 2_000 })
      .catch((e) => e);
    expect(failure).toMatchObject({ code: 'invalid_reply' });
    expect(failure.message).toMatch(/the reply from troupe.test.liar is not valid/);
  });

  it('fails with aborted when the signal fires, before or during the request', async () => {
    const early = await bus
      .request('troupe.test.echo', { taskId: 't', n: 1 }, Pong, {
        timeoutMs: 2_000,
        signal: AbortSignal.abort(),
      })
      .catch((e) => e);
    expect(early).toMatchObject({ code: 'aborted' });

    const controller = new AbortController();
    const pending = bus.request('troupe.test.silent', { taskId: 't', n: 1 }, Pong, {
      timeoutMs: 5_000,
      signal: controller.signal,
    });
    setTimeout(() => controller.abort(), 50);
    await expect(pending).rejects.toMatchObject({ code: 'aborted' });
  });
});

describe('NatsBus deliveries held while a handler works', () => {
  it("lets the message go while the handler keeps respond: a message's bytes share the socket's read buffer", async () => {
    const gc = collectGarbage();
    const holder = await otherBus('bus-holder');
    // The raw message the bus receives, watched weakly, as nats.js hands it to the bus.
    let received: WeakRef<object> | undefined;
    const subscribe = holder.connection.subscribe.bind(holder.connection);
    holder.connection.subscribe = (subject, opts) =>
      subscribe(subject, {
        ...opts,
        callback: (error, msg) => {
          received = new WeakRef(msg);
          opts?.callback?.(error, msg);
        },
      });
    let respond: ((payload: unknown) => void) | undefined;
    holder.subscribe('troupe.test.held', Ping, (d) => {
      respond = d.respond;
    });
    await holder.flush();

    const reply = bus.request('troupe.test.held', { taskId: 't1', n: 7 }, Pong, { timeoutMs: 5_000 });
    await eventually(() => respond !== undefined);
    await expect
      .poll(() => {
        gc();
        return received?.deref();
      })
      .toBeUndefined();
    respond?.({ ok: true, n: 7 });
    expect(await reply).toEqual({ ok: true, n: 7 });
  });
});

describe('NatsBus queue groups', () => {
  it('delivers each message to exactly one member of the group', async () => {
    const a: number[] = [];
    const b: number[] = [];
    const other = await otherBus('queue-member');
    bus.subscribe('troupe.agents.demo.worker', Ping, (d) => void a.push(d.value.n), { queue: 'worker' });
    other.subscribe('troupe.agents.demo.worker', Ping, (d) => void b.push(d.value.n), { queue: 'worker' });
    await Promise.all([bus.flush(), other.flush()]);

    for (let n = 0; n < 40; n++) bus.publish('troupe.agents.demo.worker', { taskId: 't', n });
    await eventually(() => a.length + b.length === 40);
    await new Promise((resolve) => setTimeout(resolve, 100));

    expect(a.length + b.length).toBe(40);
    expect([...a, ...b].sort((x, y) => x - y)).toEqual(Array.from({ length: 40 }, (_, n) => n));
    expect(a.length).toBeGreaterThan(0);
    expect(b.length).toBeGreaterThan(0);
  });
});

describe('NatsBus lifecycle', () => {
  it('names the URL when it cannot connect', async () => {
    const port = await findFreePort();
    const failure = await NatsBus.connect({
      servers: `nats://127.0.0.1:${port}`,
      name: 'nobody-home',
      logger: captureLogger().logger,
    }).catch((e) => e);
    expect(failure).toBeInstanceOf(TransportError);
    expect(failure.code).toBe('connect_failed');
    expect(failure.message).toContain(`nats://127.0.0.1:${port}`);
    expect(failure.cause).toBeInstanceOf(Error);
  });

  it('waits for a server that is not up yet when told to, logging each wait', async () => {
    const port = await findFreePort();
    const captured = captureLogger();
    const connecting = NatsBus.connect({
      servers: `nats://127.0.0.1:${port}`,
      name: 'early-service',
      logger: captured.logger,
      waitForServerMs: 60_000,
    });
    await expect
      .poll(() => captured.lines.filter((l) => l.msg.includes('cannot reach NATS')).length)
      .toBeGreaterThan(1);
    const dataDir = await mkdtemp(join(tmpdir(), 'troupe-late-'));
    const late = await startNatsServer({ dataDir, port });
    try {
      const waited = await connecting;
      expect(waited.connection.getServer()).toBe(`127.0.0.1:${port}`);
      await waited.close();
    } finally {
      await late.stop();
      await rm(dataDir, { recursive: true, force: true });
    }
  });

  it('drain lets a running handler finish and its reply go out', async () => {
    const worker = await otherBus('draining-worker');
    let finished = false;
    worker.subscribe('troupe.test.slow', Ping, async (d) => {
      await new Promise((resolve) => setTimeout(resolve, 300));
      finished = true;
      d.respond({ ok: true, n: d.value.n });
    });
    await worker.flush();

    const pending = bus.request('troupe.test.slow', { taskId: 't', n: 7 }, Pong, { timeoutMs: 3_000 });
    await new Promise((resolve) => setTimeout(resolve, 50));
    await worker.drain();

    expect(finished).toBe(true);
    await expect(pending).resolves.toEqual({ ok: true, n: 7 });
    expect(worker.connection.isClosed()).toBe(true);
  });

  it('reports status changes to listeners and logs a lost connection', async () => {
    const local = await startServer();
    const { logger, lines: localLines } = captureLogger();
    const watcher = await NatsBus.connect({ servers: local.url, name: 'watcher', logger });
    const seen: string[] = [];
    watcher.onStatus((s) => seen.push(s.type));

    await local.stop();
    await eventually(() => seen.includes('disconnect'), 5_000);
    expect(localLines.some((l) => l.level === 40 && String(l.msg).startsWith('disconnected from NATS'))).toBe(
      true,
    );
    await watcher.close();
  });
});

/** A full collection, in a process not started with --expose-gc. */
function collectGarbage(): () => void {
  setFlagsFromString('--expose-gc');
  return runInNewContext('gc') as () => void;
}
