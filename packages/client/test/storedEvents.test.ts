import { connectBus, type JetStreamBus, TransportError } from '@troupe/runtime/bus';
import { captureLogger, startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventsAfter, followAllEvents } from '../src/storedEvents.ts';

let nats: TestNats;
let bus: JetStreamBus;

beforeAll(async () => {
  nats = await startTestNats();
  bus = await connectBus({ servers: nats.url, name: 'stored-events-test', logger: captureLogger().logger });
});

afterAll(async () => {
  await bus?.close();
  await nats?.stop();
});

describe('the stored events, before any coordinator made the EVENTS stream', () => {
  it('are refused with stream_missing, saying which stream', async () => {
    const error = await eventsAfter(bus, { taskId: 't-1', pipeline: 'demo' }, 0).catch((e: unknown) => e);
    expect(TransportError.is(error, 'stream_missing')).toBe(true);
    expect((error as Error).message).toBe('the stream EVENTS does not exist on this NATS server');
  });

  it('are refused with stream_missing when followed from now', async () => {
    const following = followAllEvents(bus, { signal: new AbortController().signal, onEvent: () => {} });
    await expect(following).rejects.toMatchObject({ name: 'TransportError', code: 'stream_missing' });
  });
});
