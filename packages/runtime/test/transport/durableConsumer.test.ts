import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { jetstreamManager } from '@nats-io/jetstream';
import { STREAMS, subjects } from '@troupe/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDurableConsumer } from '../../src/transport/durableConsumer.ts';
import type { EmbeddedNats } from '../../src/transport/embeddedNats.ts';
import { ensureTroupeStreams } from '../../src/transport/jetstreamSetup.ts';
import { NatsBus } from '../../src/transport/natsBus.ts';
import { publishToStream } from '../../src/transport/publishToStream.ts';
import { captureLogger, startServer } from './natsFixture.ts';

let server: EmbeddedNats;
let bus: NatsBus;

beforeAll(async () => {
  server = await startServer();
  bus = await NatsBus.connect({ servers: server.url, name: 'consumer-test', logger: captureLogger().logger });
  await ensureTroupeStreams(bus);
});

afterAll(async () => {
  await bus?.close();
  await server?.stop();
});

const options = (name: string, ackWaitMs: number) => ({
  stream: STREAMS.tasks,
  name,
  filterSubject: subjects.task(name),
  ackWaitMs,
  maxDeliver: -1,
});

describe('openDurableConsumer', () => {
  it('delivers what the stream stored before it was opened, with its headers and place, once acked', async () => {
    const subject = subjects.task('early');
    await publishToStream(bus, subject, new TextEncoder().encode('{"goal":"g"}'), {
      headers: { 'Troupe-Task-Id': 't-1' },
      msgId: 'early-1',
    });
    await publishToStream(bus, subject, new TextEncoder().encode('{"goal":"g"}'), { msgId: 'early-1' });

    const consumer = await openDurableConsumer(bus, options('early', 30_000));
    const batch = await consumer.fetch(10, 1_000);
    const got = [];
    for await (const message of batch) {
      got.push(message);
      message.ack();
    }
    expect(got).toHaveLength(1);
    expect(got[0]).toMatchObject({
      subject,
      headers: { 'Troupe-Task-Id': 't-1', 'Nats-Msg-Id': 'early-1' },
      deliveryCount: 1,
    });
    expect(new TextDecoder().decode(got[0]?.data)).toBe('{"goal":"g"}');
    expect(got[0]?.storedAt).toBeGreaterThan(Date.now() - 60_000);
  });

  it('takes the ack wait given when the consumer is there already', async () => {
    await openDurableConsumer(bus, options('again', 30_000));
    await openDurableConsumer(bus, options('again', 5_000));
    const info = await (await jetstreamManager(bus.connection)).consumers.info(STREAMS.tasks, 'again');
    expect(info.config).toMatchObject({ ack_wait: 5_000 * 1e6, max_ack_pending: -1, deliver_policy: 'all' });
  });

  it('settles through the stored message: working keeps it, nak gives it back, term and ack end it, once', async () => {
    const subject = subjects.task('settle');
    const consumer = await openDurableConsumer(bus, options('settle', 30_000));
    const pending = async () =>
      (await (await jetstreamManager(bus.connection)).consumers.info(STREAMS.tasks, 'settle'))
        .num_ack_pending;
    const one = async () => {
      const batch = await consumer.fetch(1, 1_000);
      for await (const message of batch) return message;
      throw new Error('nothing delivered');
    };
    await publishToStream(bus, subject, new TextEncoder().encode('{"goal":"a"}'), { msgId: 'settle-a' });

    const first = await one();
    first.working();
    first.nak();
    first.ack(); // after a nak: not sent
    const again = await one();
    expect(again).toMatchObject({ streamSequence: first.streamSequence, deliveryCount: 2 });
    again.term();
    await expect.poll(pending).toBe(0);

    await publishToStream(bus, subject, new TextEncoder().encode('{"goal":"b"}'), { msgId: 'settle-b' });
    const later = await one();
    later.nak(60_000);
    await expect.poll(pending).toBe(1);
    const none = await consumer.fetch(1, 1_000);
    const redelivered = [];
    for await (const message of none) redelivered.push(message);
    expect(redelivered).toEqual([]);
  });

  it("keeps neither the message nor a view of the socket's read buffer while it is held", async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const holder = await NatsBus.connect({
      servers: server.url,
      name: 'consumer-holder',
      logger: captureLogger().logger,
    });
    try {
      // Every raw message the connection receives, watched weakly, as nats.js hands it to the pull's subscription.
      const received: WeakRef<object>[] = [];
      const subscribe = holder.connection.subscribe.bind(holder.connection);
      holder.connection.subscribe = (subject, opts) =>
        subscribe(subject, {
          ...opts,
          callback: (error, msg) => {
            received.push(new WeakRef(msg));
            opts?.callback?.(error, msg);
          },
        });
      await publishToStream(bus, subjects.task('held'), new TextEncoder().encode('{"goal":"g"}'), {
        msgId: 'held-1',
      });
      const consumer = await openDurableConsumer(holder, options('held', 30_000));
      const held = [];
      for await (const message of await consumer.fetch(1, 1_000)) held.push(message);
      const [message] = held;
      expect(new TextDecoder().decode(message?.data)).toBe('{"goal":"g"}');
      expect(message?.data.buffer.byteLength).toBe(message?.data.byteLength);
      expect(received.length).toBeGreaterThan(0);
      await expect
        .poll(() => {
          gc();
          return received.filter((ref) => ref.deref() !== undefined).length;
        })
        .toBe(0);
      message?.ack();
      await expect
        .poll(
          async () =>
            (await (await jetstreamManager(bus.connection)).consumers.info(STREAMS.tasks, 'held'))
              .num_ack_pending,
        )
        .toBe(0);
    } finally {
      await holder.close();
    }
  });
});
