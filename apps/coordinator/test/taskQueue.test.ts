import { AckPolicy, jetstreamManager } from '@nats-io/jetstream';
import { submitTask } from '@troupe/client';
import { STREAMS } from '@troupe/protocol';
import { ensureTroupeStreams, NatsBus } from '@troupe/runtime';
import { captureLogger, type LogLine, startTestNats, type TestNats } from '@troupe/testkit';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { startTaskQueue, type TaskDelivery } from '../src/intake/taskQueue.ts';

let nats: TestNats;
let bus: NatsBus;
let lines: LogLine[];

beforeEach(async () => {
  nats = await startTestNats();
  const capture = captureLogger();
  lines = capture.lines;
  bus = await NatsBus.connect({ servers: nats.url, name: 'queue-test', logger: capture.logger });
  await ensureTroupeStreams(bus);
});

afterEach(async () => {
  vi.restoreAllMocks();
  await bus?.close();
  await nats?.stop();
});

type ConsumerApi = { info(this: unknown, ...args: unknown[]): Promise<unknown> };

describe('startTaskQueue', () => {
  it('sets up its consumer through an outage, logging each wait, then serves tasks', async () => {
    // The outage starts just as the consumer is looked up, after the JetStream API has answered.
    const consumerApi = Object.getPrototypeOf(
      (await jetstreamManager(bus.connection)).consumers,
    ) as ConsumerApi;
    const lookUp = consumerApi.info;
    vi.spyOn(consumerApi, 'info').mockImplementationOnce(async function (this: unknown, ...args: unknown[]) {
      await nats.pause();
      return lookUp.apply(this, args);
    });
    const delivered: TaskDelivery[] = [];
    let settled = false;
    const starting = startTaskQueue(bus, {
      pipeline: 'outage',
      concurrency: 1,
      handle: async (delivery) => {
        delivered.push(delivery);
        delivery.ack();
      },
    });
    const outcome = starting.then(
      () => 'started',
      (error: unknown) => error,
    );
    void outcome.finally(() => (settled = true));
    const waits = () =>
      lines.filter((l) => l.level === 40 && l.waitingFor === 'consumer troupe-tasks-outage');
    await expect.poll(() => settled || waits().length > 0, { timeout: 30_000 }).toBe(true);
    await nats.resume();

    expect(await outcome).toBe('started');
    const queue = await starting;
    try {
      expect(waits()[0]).toMatchObject({
        retryInMs: 250,
        err: { message: expect.stringContaining('timeout') },
      });
      const jsm = await jetstreamManager(bus.connection);
      expect((await jsm.consumers.info(STREAMS.tasks, 'troupe-tasks-outage')).config.durable_name).toBe(
        'troupe-tasks-outage',
      );
      await submitTask(bus, 'outage', { id: 'task-after-outage', goal: 'run after the outage' });
      await expect
        .poll(() => delivered.map((d) => d.subject), { timeout: 10_000 })
        .toEqual(['troupe.tasks.outage']);
    } finally {
      await queue.stop();
    }
  }, 60_000);
});

describe('parked tasks', () => {
  /** A queue whose handler holds every task until the test releases it; `park` parks a held task. */
  async function holdingQueue(pipeline: string, options: { concurrency: number; maxInFlight?: number }) {
    const held = new Map<string, { delivery: TaskDelivery; release: () => void }>();
    const queue = await startTaskQueue(bus, {
      pipeline,
      ...options,
      handle: (delivery) =>
        new Promise<void>((resolve) => {
          const id = JSON.parse(new TextDecoder().decode(delivery.data)).id as string;
          held.set(id, {
            delivery,
            release: () => {
              delivery.ack();
              resolve();
            },
          });
        }),
    });
    const submit = async (count: number) => {
      for (let i = 0; i < count; i++)
        await submitTask(bus, pipeline, { id: `${pipeline}-${i}`, goal: 'wait' });
    };
    return { queue, held, submit };
  }

  it('does not count a parked task against the concurrency limit, and counts it again once it works', async () => {
    const { queue, held, submit } = await holdingQueue('parking', { concurrency: 2 });
    try {
      await submit(5);
      await expect.poll(() => held.size, { timeout: 10_000 }).toBe(2);
      // Two parked tasks free two working slots: two more tasks start.
      for (const id of ['parking-0', 'parking-1']) held.get(id)?.delivery.park(true);
      await expect.poll(() => held.size, { timeout: 10_000 }).toBe(4);
      expect(queue.parked).toBe(2);
      expect(queue.active).toBe(4);
      // Working again, they count again: four working, over the limit, so nothing new starts until two end.
      for (const id of ['parking-0', 'parking-1']) held.get(id)?.delivery.park(false);
      expect(queue.parked).toBe(0);
      held.get('parking-2')?.release();
      await expect.poll(() => queue.active, { timeout: 10_000 }).toBe(3);
      expect(held.size).toBe(4);
      held.get('parking-3')?.release();
      await expect.poll(() => queue.active, { timeout: 10_000 }).toBe(2);
      expect(held.size).toBe(4);
      // Two working, at the limit; one more ends and the last task starts.
      held.get('parking-0')?.release();
      await expect.poll(() => held.size, { timeout: 10_000 }).toBe(5);
    } finally {
      for (const task of held.values()) task.release();
      await queue.stop();
    }
  }, 60_000);

  it('holds no more than maxInFlight tasks, parked or not', async () => {
    const { queue, held, submit } = await holdingQueue('inflight', { concurrency: 1, maxInFlight: 3 });
    try {
      await submit(5);
      for (let parked = 1; parked <= 3; parked++) {
        await expect.poll(() => held.size, { timeout: 10_000 }).toBe(parked);
        held.get(`inflight-${parked - 1}`)?.delivery.park(true);
      }
      // Three held, all parked: the working slot is free, the in-flight cap is not.
      await expect.poll(() => queue.parked, { timeout: 10_000 }).toBe(3);
      expect(queue.active).toBe(3);
      expect(held.size).toBe(3);
      held.get('inflight-0')?.release();
      await expect.poll(() => held.size, { timeout: 10_000 }).toBe(4);
      expect(queue.active).toBe(3);
    } finally {
      for (const task of held.values()) task.release();
      await queue.stop();
    }
  }, 60_000);

  it('lifts the server-wide cap on unacknowledged tasks, also on a consumer made before', async () => {
    const jsm = await jetstreamManager(bus.connection);
    await jsm.consumers.add(STREAMS.tasks, {
      durable_name: 'troupe-tasks-older',
      filter_subject: 'troupe.tasks.older',
      ack_policy: AckPolicy.Explicit,
    });
    expect((await jsm.consumers.info(STREAMS.tasks, 'troupe-tasks-older')).config.max_ack_pending).toBe(
      1_000,
    );
    const queue = await startTaskQueue(bus, { pipeline: 'older', concurrency: 1, handle: async () => {} });
    try {
      expect((await jsm.consumers.info(STREAMS.tasks, 'troupe-tasks-older')).config.max_ack_pending).toBe(-1);
    } finally {
      await queue.stop();
    }
  }, 30_000);
});

describe('held intake', () => {
  it('pulls no task while held, and goes on once released, the tasks held before unaffected', async () => {
    let held = false;
    const handled: string[] = [];
    const queue = await startTaskQueue(bus, {
      pipeline: 'backpressure',
      concurrency: 4,
      holdIntake: () => held,
      handle: async (delivery) => {
        handled.push(JSON.parse(new TextDecoder().decode(delivery.data)).id);
        delivery.ack();
      },
    });
    try {
      await submitTask(bus, 'backpressure', { id: 'before', goal: 'runs' });
      await expect.poll(() => handled, { timeout: 10_000 }).toEqual(['before']);
      held = true;
      // The pull already waiting ends (it expires); no other is made while held.
      const jsm = await jetstreamManager(bus.connection);
      const consumer = () => jsm.consumers.info(STREAMS.tasks, 'troupe-tasks-backpressure');
      await expect.poll(async () => (await consumer()).num_waiting, { timeout: 10_000 }).toBe(0);
      for (const id of ['first-held', 'second-held', 'third-held']) {
        await submitTask(bus, 'backpressure', { id, goal: 'waits' });
      }
      expect(await consumer()).toMatchObject({ num_pending: 3, num_waiting: 0 });
      expect(handled).toEqual(['before']);
      held = false;
      await expect
        .poll(() => [...handled].sort(), { timeout: 10_000 })
        .toEqual(['before', 'first-held', 'second-held', 'third-held']);
    } finally {
      await queue.stop();
    }
  }, 30_000);
});
