import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addWork, ensureWorkQueue, WorkQueue, type WorkQueueSpec } from '../../src/durable/workQueue.ts';
import { jetstreamManagerOf } from '../../src/transport/jetstreamSetup.ts';
import { NatsBus } from '../../src/transport/natsBus.ts';
import { captureLogger } from '../transport/natsFixture.ts';

let nats: TestNats;
let bus: NatsBus;

beforeAll(async () => {
  nats = await startTestNats();
  bus = await NatsBus.connect({ servers: nats.url, name: 'work-queue-test', logger: captureLogger().logger });
});

afterAll(async () => {
  await bus?.close();
  await nats?.stop();
});

let queues = 0;
const newSpec = (ackWaitMs = 30_000): WorkQueueSpec => {
  queues += 1;
  return { stream: `WQ_${queues}`, subjects: `wq${queues}.>`, consumer: `takers-${queues}`, ackWaitMs };
};

describe('WorkQueue', () => {
  it('gives each item to one taker, keeps a handed-back one, and forgets a done one', async () => {
    const spec = newSpec();
    await Promise.all([ensureWorkQueue(bus, spec), ensureWorkQueue(bus, spec)]);
    await addWork(bus, 'wq1.a');
    const first = await WorkQueue.open(bus, spec);
    const second = await WorkQueue.open(bus, spec);
    const taken = await first.take(1_000);
    expect(taken?.subject).toBe('wq1.a');
    // Held by the first taker: the second finds nothing.
    expect(await second.take(1_000)).toBeUndefined();
    taken?.handBack();
    const again = await second.take(1_000);
    expect(again?.subject).toBe('wq1.a');
    again?.done();
    await expect
      .poll(async () => (await (await jetstreamManagerOf(bus)).streams.info(spec.stream)).state.messages)
      .toBe(0);
  });

  it('hands an item on once its taker has given no sign of life for its ack wait', async () => {
    const spec = newSpec(300);
    await ensureWorkQueue(bus, spec);
    await addWork(bus, `wq${queues}.job`);
    const queue = await WorkQueue.open(bus, spec);
    expect((await queue.take(1_000))?.subject).toBe(`wq${queues}.job`);
    // Never settled: taken again once its ack wait runs out.
    expect((await queue.take(2_000))?.subject).toBe(`wq${queues}.job`);
  });

  it('sets a new ack wait on its consumer only when told to', async () => {
    const spec = newSpec(30_000);
    await ensureWorkQueue(bus, spec);
    const ackWait = async () =>
      (await (await jetstreamManagerOf(bus)).consumers.info(spec.stream, spec.consumer)).config.ack_wait;
    await ensureWorkQueue(bus, { ...spec, ackWaitMs: 10_000 });
    expect(await ackWait()).toBe(30_000 * 1_000_000);
    await ensureWorkQueue(bus, { ...spec, ackWaitMs: 10_000 }, true);
    expect(await ackWait()).toBe(10_000 * 1_000_000);
  });

  it('ends a pull under way at once when stopped', async () => {
    const spec = newSpec();
    await ensureWorkQueue(bus, spec);
    const queue = await WorkQueue.open(bus, spec);
    const started = Date.now();
    const taking = queue.take(10_000);
    let ended = false;
    void taking.then(() => {
      ended = true;
    });
    // Stopped as soon as the pull is under way.
    await expect
      .poll(() => {
        queue.stop();
        return ended;
      })
      .toBe(true);
    expect(await taking).toBeUndefined();
    expect(Date.now() - started).toBeLessThan(5_000);
  });
});
