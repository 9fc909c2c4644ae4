import { jetstreamManager } from '@nats-io/jetstream';
import { STREAMS } from '@troupe/protocol';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { startTaskQueue, submitTask, type TaskDelivery } from '../../src/durable/taskQueue.ts';
import { ensureTroupeStreams } from '../../src/transport/jetstreamSetup.ts';
import { NatsBus } from '../../src/transport/natsBus.ts';
import { captureLogger, type LogLine } from '../transport/natsFixture.ts';

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
