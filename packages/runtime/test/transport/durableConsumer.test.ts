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
});
