import { subjects, type TroupeEvent } from '@troupe/protocol';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { readEventHistory, type StoredEvent } from '../../src/durable/eventHistory.ts';
import { ensureTroupeStreams } from '../../src/transport/jetstreamSetup.ts';
import { NatsBus } from '../../src/transport/natsBus.ts';
import { captureLogger } from '../transport/natsFixture.ts';

const TRACEPARENT = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';

const accepted = (id: string, taskId: string): TroupeEvent => ({
  id,
  ts: new Date().toISOString(),
  pipeline: 'demo',
  taskId,
  kind: 'task.accepted',
  traceparent: TRACEPARENT,
  data: { goal: id },
});

async function readAll(bus: NatsBus, subject: string, since?: Date): Promise<StoredEvent[]> {
  const read: StoredEvent[] = [];
  for await (const stored of readEventHistory(bus, { subject, ...(since ? { since } : {}), batch: 2 })) {
    read.push(stored);
  }
  return read;
}

const ids = (stored: StoredEvent[]) => stored.map((s) => s.event.id);

let nats: TestNats;
let bus: NatsBus;

beforeEach(async () => {
  nats = await startTestNats();
  bus = await NatsBus.connect({ servers: nats.url, name: 'history-test', logger: captureLogger().logger });
});

afterEach(async () => {
  await bus?.close();
  await nats?.stop();
});

describe('readEventHistory', () => {
  it('fails with stream_missing when no coordinator has created the stream', async () => {
    await expect(readAll(bus, subjects.allEvents)).rejects.toMatchObject({
      name: 'TransportError',
      code: 'stream_missing',
    });
  });

  it("reads one task's stored events in order, in batches, and ends without waiting when there are none", async () => {
    await ensureTroupeStreams(bus);
    expect(await readAll(bus, subjects.taskEvents('t-1'))).toEqual([]);
    for (const id of ['a', 'b', 'c', 'd', 'e'])
      expect(await bus.publishEvent(accepted(id, 't-1'))).toBe(true);
    expect(await bus.publishEvent(accepted('other', 't-2'))).toBe(true);

    expect(ids(await readAll(bus, subjects.taskEvents('t-1')))).toEqual(['a', 'b', 'c', 'd', 'e']);
    expect(ids(await readAll(bus, subjects.taskEvents('t-2')))).toEqual(['other']);
  });

  it('starts at a time, and tells reports of invalid messages from events', async () => {
    await ensureTroupeStreams(bus);
    expect(await bus.publishEvent(accepted('before', 't-1'))).toBe(true);
    // Stream times have nanoseconds, a Date milliseconds: start a millisecond after the first was stored.
    const since = new Date(Date.now() + 1);
    await expect.poll(() => Date.now()).toBeGreaterThan(since.getTime());
    expect(await bus.publishEvent(accepted('after', 't-1'))).toBe(true);
    bus.reportInvalid({
      subject: 'troupe.tasks.demo',
      reporter: 'test',
      reason: 'bad',
      issues: [],
      payload: '',
    });
    await bus.flush();

    await expect
      .poll(async () => (await readAll(bus, subjects.allEvents, since)).map((s) => s.type))
      .toEqual(['event', 'invalid']);
    expect(ids(await readAll(bus, subjects.allEvents, since))[0]).toBe('after');
  });
});
