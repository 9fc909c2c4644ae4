import { JetStreamApiError, jetstreamManager } from '@nats-io/jetstream';
import { PermissionViolationError, RequestError, TimeoutError } from '@nats-io/transport-node';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NatsBus } from '../../src/transport/natsBus.ts';
import { untilReachable } from '../../src/transport/untilReachable.ts';
import { captureLogger, type LogLine } from './natsFixture.ts';

let nats: TestNats;
let bus: NatsBus;
let lines: LogLine[];

beforeAll(async () => {
  nats = await startTestNats();
  const capture = captureLogger();
  lines = capture.lines;
  bus = await NatsBus.connect({ servers: nats.url, name: 'reach-test', logger: capture.logger });
});

afterAll(async () => {
  await bus?.close();
  await nats?.stop();
});

/** The warn lines of waits for `what`. */
const waitsFor = (what: string): LogLine[] => lines.filter((l) => l.level === 40 && l.waitingFor === what);

/** An operation that fails with each of `errors` in turn, then returns `value`; counts its calls. */
function failing<T>(errors: Error[], value: T): { op: () => Promise<T>; calls: () => number } {
  let calls = 0;
  return {
    op: async () => {
      const error = errors[calls++];
      if (error !== undefined) throw error;
      return value;
    },
    calls: () => calls,
  };
}

const apiError = (err_code: number, code: number, description: string): JetStreamApiError =>
  new JetStreamApiError({ code, err_code, description });

describe('untilReachable', () => {
  it('tries again through timeouts and an unavailable cluster, backing off and logging each wait', async () => {
    const { op, calls } = failing(
      [
        new TimeoutError(),
        apiError(10008, 503, 'JetStream system temporarily unavailable'),
        new TimeoutError(),
      ],
      42,
    );

    await expect(untilReachable(bus, 'stream FLAKY', op)).resolves.toBe(42);

    expect(calls()).toBe(4);
    expect(waitsFor('stream FLAKY').map((l) => [l.attempt, l.retryInMs])).toEqual([
      [1, 250],
      [2, 500],
      [3, 1_000],
    ]);
    expect(waitsFor('stream FLAKY')[1]).toMatchObject({
      server: bus.connection.getServer(),
      err: { message: 'JetStream system temporarily unavailable' },
      msg: expect.stringMatching(/^waiting for JetStream: stream FLAKY: .*; trying again in 500 ms/),
    });
    expect(lines.some((l) => l.level === 30 && l.waitingFor === 'stream FLAKY' && l.waits === 3)).toBe(true);
  });

  it('gives up with jetstream_unavailable once the outage bound has passed', async () => {
    const { op, calls } = failing(
      Array.from({ length: 100 }, () => new TimeoutError()),
      'never',
    );

    const error = await untilReachable(bus, 'stream GONE', op, { outageMs: 600 }).catch((e: unknown) => e);

    expect(error).toMatchObject({
      name: 'TransportError',
      code: 'jetstream_unavailable',
      message: expect.stringContaining('gave up waiting for JetStream'),
      cause: expect.any(TimeoutError),
    });
    expect(calls()).toBeGreaterThanOrEqual(2);
    expect(waitsFor('stream GONE').length).toBe(calls() - 1);
  });

  it('waits out "JetStream not enabled" answers for a while, as a restarting server gives them', async () => {
    const notEnabled = () => apiError(10076, 503, 'JetStream not enabled');
    const { op } = failing([notEnabled(), notEnabled()], 'ready');

    await expect(untilReachable(bus, 'stream RESTARTING', op, { noJetStreamMs: 5_000 })).resolves.toBe(
      'ready',
    );
    expect(waitsFor('stream RESTARTING')).toHaveLength(2);
  });

  it('gives up on "JetStream not enabled" after its own, shorter bound, saying to start nats-server with -js', async () => {
    const { op } = failing(
      Array.from({ length: 100 }, () => apiError(10076, 503, 'JetStream not enabled')),
      'never',
    );

    const error = await untilReachable(bus, 'stream NOJS', op, { noJetStreamMs: 300 }).catch(
      (e: unknown) => e,
    );

    expect(error).toMatchObject({
      code: 'jetstream_unavailable',
      message: expect.stringContaining('Start nats-server with -js'),
    });
  });

  it('fails at once on a JetStream API error that is an answer, not an outage', async () => {
    const overlap = apiError(10065, 400, 'subjects overlap with an existing stream');
    const { op, calls } = failing([overlap], 'never');

    await expect(untilReachable(bus, 'stream OVERLAP', op)).rejects.toBe(overlap);
    expect(calls()).toBe(1);
    expect(waitsFor('stream OVERLAP')).toEqual([]);
  });

  it('fails at once with permission_denied when the server refuses the user the request, saying so', async () => {
    // What nats.js gives a request whose subject the user may not publish to.
    const refusal = new RequestError('Permissions Violation for Publish to "$JS.API.STREAM.CREATE.TASKS"', {
      cause: new PermissionViolationError('Permissions Violation', 'publish', '$JS.API.STREAM.CREATE.TASKS'),
    });
    const { op, calls } = failing([refusal], 'never');

    const error = await untilReachable(bus, 'stream TASKS', op).catch((e: unknown) => e);
    expect(error).toMatchObject({ name: 'TransportError', code: 'permission_denied' });
    expect((error as Error).message).toContain("refused this client's user (stream TASKS)");
    expect(calls()).toBe(1);
    expect(waitsFor('stream TASKS')).toEqual([]);
  });

  it('fails at once on a closed connection', async () => {
    const closed = await NatsBus.connect({ servers: nats.url, name: 'reach-closed', logger: bus.logger });
    await closed.close();
    let calls = 0;

    const error = await untilReachable(closed, 'the JetStream API', () => {
      calls++;
      return jetstreamManager(closed.connection);
    }).catch((e: unknown) => e);

    expect(error).toMatchObject({ name: 'ClosedConnectionError' });
    expect(calls).toBe(1);
  });
});
