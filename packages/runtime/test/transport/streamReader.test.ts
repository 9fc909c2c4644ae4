import { STREAMS, subjects } from '@troupe/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EmbeddedNats } from '../../src/transport/embeddedNats.ts';
import { ensureTroupeStreams, jetstreamManagerOf } from '../../src/transport/jetstreamSetup.ts';
import { NatsBus, natsConnectionOf } from '../../src/transport/natsBus.ts';
import { publishToStream } from '../../src/transport/publishToStream.ts';
import {
  lastStreamSequence,
  openStreamReader,
  type StreamMessage,
} from '../../src/transport/streamReader.ts';
import { TransportError } from '../../src/transport/transportError.ts';
import { captureLogger, startServer } from './natsFixture.ts';

let server: EmbeddedNats;
let bus: NatsBus;

beforeAll(async () => {
  server = await startServer();
  bus = await NatsBus.connect({ servers: server.url, name: 'reader-test', logger: captureLogger().logger });
});

afterAll(async () => {
  await bus?.close();
  await server?.stop();
});

const text = (msg: StreamMessage) => new TextDecoder().decode(msg.data);

describe('before the stream exists', () => {
  it('openStreamReader and lastStreamSequence fail with stream_missing, naming the stream', async () => {
    const opening = openStreamReader(bus, STREAMS.events, { subject: subjects.allTaskEvents });
    await expect(opening).rejects.toMatchObject({
      name: 'TransportError',
      code: 'stream_missing',
      message: `the stream ${STREAMS.events} does not exist on this NATS server`,
    });
    const last = await lastStreamSequence(bus, STREAMS.events).catch((e: unknown) => e);
    expect(TransportError.is(last, 'stream_missing')).toBe(true);
  });
});

describe('with the streams made', () => {
  beforeAll(async () => {
    await ensureTroupeStreams(bus);
  });

  it('publishToStream says where the stream stored a message, and that a second one with its id was a duplicate', async () => {
    const subject = subjects.task('acked');
    const first = await publishToStream(bus, subject, '{"goal":"a"}', { msgId: 'acked-1' });
    const again = await publishToStream(bus, subject, '{"goal":"a"}', { msgId: 'acked-1' });
    expect(first).toEqual({ seq: expect.any(Number), duplicate: false });
    expect(again).toEqual({ seq: first.seq, duplicate: true });
  });

  it('reads one subject in stream order after a sequence: what is stored, then what comes; pending counts what is left', async () => {
    const subject = subjects.event('demo', 'r-1', 'step.started');
    const before = await lastStreamSequence(bus, STREAMS.events);
    const one = await publishToStream(bus, subject, '{"n":1}');
    const two = await publishToStream(bus, subject, '{"n":2}');
    const three = await publishToStream(bus, subject, '{"n":3}');
    // Another task's event between them is not this reader's.
    await publishToStream(bus, subjects.event('demo', 'r-2', 'step.started'), '{"n":0}');
    expect(await lastStreamSequence(bus, STREAMS.events)).toBe(before + 4);

    const reader = await openStreamReader(bus, STREAMS.events, { subject, after: one.seq });
    expect(await reader.pending()).toBe(2);
    const got: string[] = [];
    const messages = await reader.read();
    const reading = (async () => {
      for await (const msg of messages) {
        got.push(`${msg.seq}:${msg.subject}:${text(msg)}`);
        if (got.length === 3) messages.stop();
      }
    })();
    await expect.poll(() => got.length).toBe(2);
    const live = await publishToStream(bus, subject, '{"n":4}');
    await reading;
    await reader.close();
    expect(got).toEqual([
      `${two.seq}:${subject}:{"n":2}`,
      `${three.seq}:${subject}:{"n":3}`,
      `${live.seq}:${subject}:{"n":4}`,
    ]);
  });

  it('close removes the reader from the server, and a second close does no harm', async () => {
    const jsm = await jetstreamManagerOf(bus);
    const count = async () => (await jsm.streams.info(STREAMS.events)).state.consumer_count;
    const was = await count();
    const reader = await openStreamReader(bus, STREAMS.events, { subject: subjects.allTaskEvents });
    expect(await count()).toBe(was + 1);
    await reader.close();
    await reader.close();
    expect(await count()).toBe(was);
  });
});

describe('natsConnectionOf', () => {
  it('gives the runtime the connection under a NatsBus, and refuses a bus that is not over NATS with not_nats', () => {
    expect(natsConnectionOf(bus)).toBe(bus.connection);
    const other = { name: 'memory' } as unknown as NatsBus;
    expect(() => natsConnectionOf(other)).toThrow(
      expect.objectContaining({ code: 'not_nats', message: expect.stringContaining('memory') }),
    );
  });

  it('knows a NatsBus made by another copy of its module, as one CLI bundle hands another (troupe up --gateway)', async () => {
    // A module id of its own makes vitest load the file again: a second NatsBus class, as a second bundle has.
    const copyOfModule = '../../src/transport/natsBus.ts?copy';
    const copy: typeof import('../../src/transport/natsBus.ts') = await import(copyOfModule);
    expect(copy.NatsBus).not.toBe(NatsBus);
    const copied = await copy.NatsBus.connect({
      servers: server.url,
      name: 'copy',
      logger: captureLogger().logger,
    });
    try {
      expect(copied).not.toBeInstanceOf(NatsBus);
      expect(natsConnectionOf(copied)).toBe(copied.connection);
    } finally {
      await copied.close();
    }
  });
});

describe('a stream with gaps', () => {
  beforeAll(async () => {
    await ensureTroupeStreams(bus);
  });

  it('reads past a deleted message and from a start the stream purged, counting only what it holds', async () => {
    const jsm = await jetstreamManagerOf(bus);
    const subject = subjects.event('demo', 'gaps-1', 'step.started');
    const one = await publishToStream(bus, subject, '{"n":1}');
    const two = await publishToStream(bus, subject, '{"n":2}');
    const three = await publishToStream(bus, subject, '{"n":3}');
    const four = await publishToStream(bus, subject, '{"n":4}');
    // A hole in the middle, and the start of the task's messages gone (as max_age or a purge leaves them).
    await jsm.streams.deleteMessage(STREAMS.events, three.seq);
    await jsm.streams.purge(STREAMS.events, { filter: subject, seq: two.seq });

    const fromGone = await openStreamReader(bus, STREAMS.events, { subject, after: one.seq - 1 });
    expect(await fromGone.pending()).toBe(2);
    const got: number[] = [];
    const messages = await fromGone.read();
    for await (const msg of messages) {
      got.push(msg.seq);
      if (got.length === 2) messages.stop();
    }
    await fromGone.close();
    expect(got).toEqual([two.seq, four.seq]);

    const afterHole = await openStreamReader(bus, STREAMS.events, { subject, after: three.seq });
    expect(await afterHole.pending()).toBe(1);
    await afterHole.close();
    const pastEnd = await openStreamReader(bus, STREAMS.events, { subject, after: four.seq + 100 });
    expect(await pastEnd.pending()).toBe(0);
    await pastEnd.close();
  });
});

describe('pending', () => {
  beforeAll(async () => {
    await ensureTroupeStreams(bus);
  });

  it('counts what is left now, not what was when the reader opened: messages stored since count, delivered ones do not', async () => {
    const subject = subjects.event('demo', 'pending-1', 'step.started');
    const start = await lastStreamSequence(bus, STREAMS.events);
    await publishToStream(bus, subject, '{"n":1}');
    const reader = await openStreamReader(bus, STREAMS.events, { subject, after: start });
    try {
      expect(await reader.pending()).toBe(1);
      await publishToStream(bus, subject, '{"n":2}');
      expect(await reader.pending()).toBe(2);
      const messages = await reader.read();
      const got: number[] = [];
      for await (const msg of messages) {
        got.push(msg.seq);
        if (got.length === 2) messages.stop();
      }
      await expect.poll(() => reader.pending()).toBe(0);
    } finally {
      await reader.close();
    }
  });
});
