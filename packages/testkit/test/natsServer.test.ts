import { stat } from 'node:fs/promises';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestNats, type TestNats } from '../src/index.ts';

let nats: TestNats;

beforeAll(async () => {
  nats = await startTestNats();
});

afterAll(async () => {
  await nats?.stop();
});

async function withConnection<T>(work: (nc: NatsConnection) => Promise<T>): Promise<T> {
  const nc = await connect({ servers: nats.url });
  try {
    return await work(nc);
  } finally {
    await nc.close();
  }
}

describe('startTestNats', () => {
  it('runs a JetStream server on a free local port with a temp data dir', async () => {
    expect(nats.url).toBe(`nats://127.0.0.1:${nats.port}`);
    expect(nats.port).not.toBe(4222);
    expect((await stat(nats.dataDir)).isDirectory()).toBe(true);
    const info = await withConnection(async (nc) => (await jetstreamManager(nc)).getAccountInfo());
    expect(info.streams).toBe(0);
  });

  it('keeps JetStream data across a restart on the same port', async () => {
    await withConnection(async (nc) => {
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: 'KEEP', subjects: ['keep.>'], storage: 'file' });
      await jetstream(nc).publish('keep.one', 'first');
    });
    const pidBefore = nats.pid;

    await nats.restart();

    expect(nats.pid).not.toBe(pidBefore);
    const stored = await withConnection(async (nc) => {
      const jsm = await jetstreamManager(nc);
      return jsm.streams.getMessage('KEEP', { last_by_subj: 'keep.one' });
    });
    expect(stored?.string()).toBe('first');
  });

  it('pauses the server, keeping its port and data dir, until it is resumed', async () => {
    await withConnection(async (nc) => {
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: 'PAUSED', subjects: ['paused.>'], storage: 'file' });
      await jetstream(nc).publish('paused.one', 'kept');
    });
    const pidBefore = nats.pid;

    await nats.pause();

    expect(() => process.kill(pidBefore, 0)).toThrow();
    expect((await stat(nats.dataDir)).isDirectory()).toBe(true);
    await expect(connect({ servers: nats.url, reconnect: false })).rejects.toThrow();
    await nats.resume();
    await nats.resume();
    const stored = await withConnection(async (nc) => {
      const jsm = await jetstreamManager(nc);
      return jsm.streams.getMessage('PAUSED', { last_by_subj: 'paused.one' });
    });
    expect(stored?.string()).toBe('kept');
  });

  it('stops the server and removes its data dir', async () => {
    const other = await startTestNats({ jetstream: false });
    const { pid, dataDir } = other;
    await other.stop();
    expect(() => process.kill(pid, 0)).toThrow();
    await expect(stat(dataDir)).rejects.toMatchObject({ code: 'ENOENT' });
    await other.stop();
  });
});
