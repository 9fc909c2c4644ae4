import { DiscardPolicy, JetStreamApiError, jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { BUCKETS } from '@troupe/protocol';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { KvStore, lostCompare } from '../../src/durable/kvStore.ts';
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
  bus = await NatsBus.connect({ servers: nats.url, name: 'kv-test', logger: capture.logger });
});

afterEach(async () => {
  await bus?.close();
  await nats?.stop();
});

const Note = z.object({ text: z.string() });
const waits = (): LogLine[] => lines.filter((l) => l.level === 40 && 'waitingFor' in l);

describe('KvStore.open', () => {
  it('fails at once with bucket_missing when no coordinator has created the bucket', async () => {
    const started = performance.now();

    await expect(KvStore.open(bus, BUCKETS.workflows, Note)).rejects.toMatchObject({
      name: 'TransportError',
      code: 'bucket_missing',
      message: 'the KV bucket workflows does not exist on this NATS server',
    });
    expect(waits()).toEqual([]);
    expect(performance.now() - started).toBeLessThan(5_000);
  });

  it('waits while nats-server is down, logging each wait, and opens the bucket once it is back', async () => {
    await ensureTroupeStreams(bus);
    await nats.pause();
    let settled = false;
    const opening = KvStore.open(bus, BUCKETS.memory, Note);
    const outcome = opening.then(
      () => 'open',
      (error: unknown) => error,
    );
    void outcome.finally(() => (settled = true));
    await expect.poll(() => settled || waits().length > 0, { timeout: 30_000 }).toBe(true);
    await nats.resume();

    expect(await outcome).toBe('open');
    const store = await opening;
    expect(waits()[0]).toMatchObject({ waitingFor: 'KV bucket memory', retryInMs: 250 });
    await store.put('note-1', { text: 'kept' });
    expect(await store.get('note-1')).toMatchObject({ value: { text: 'kept' } });
  }, 60_000);
});

/** The subjects of the JetStream API requests `work` makes. */
async function apiRequests(work: () => Promise<unknown>): Promise<string[]> {
  const seen: string[] = [];
  const spy = bus.connection.subscribe('$JS.API.>', { callback: (_e, msg) => void seen.push(msg.subject) });
  await bus.connection.flush();
  await work();
  await bus.connection.flush();
  spy.unsubscribe();
  return seen;
}

describe('KvStore reads', () => {
  /** The subjects of the read requests `read` makes, through the JetStream API or the stream's direct get. */
  const readRequests = async (read: () => Promise<unknown>): Promise<string[]> =>
    (await apiRequests(read)).filter((s) => s.includes('.MSG.GET.') || s.includes('.DIRECT.GET.'));

  it("use the stream's direct get when the bucket allows it, as Troupe's buckets do", async () => {
    await ensureTroupeStreams(bus);
    const store = await KvStore.open(bus, BUCKETS.memory, Note);
    await store.put('k', { text: 'kept' });
    let value: unknown;
    const requests = await readRequests(async () => (value = (await store.get('k'))?.value));
    expect(value).toEqual({ text: 'kept' });
    expect(requests).toEqual(['$JS.API.DIRECT.GET.KV_memory.$KV.memory.k']);
  });

  it('read through the JetStream API from a bucket made without direct get', async () => {
    const jsm = await jetstreamManager(bus.connection);
    await jsm.streams.add({
      name: 'KV_memory',
      subjects: ['$KV.memory.>'],
      allow_direct: false,
      allow_rollup_hdrs: true,
      max_msgs_per_subject: 1,
      discard: DiscardPolicy.New,
    });
    const store = await KvStore.open(bus, BUCKETS.memory, Note);
    await store.put('k', { text: 'kept' });
    let value: unknown;
    const requests = await readRequests(async () => (value = (await store.get('k'))?.value));
    expect(value).toEqual({ text: 'kept' });
    expect(requests).toEqual(['$JS.API.STREAM.MSG.GET.KV_memory']);
  });

  it('read a value that is not JSON as absent, with a warning, never throwing', async () => {
    // A mark written by hand or by a broken client: a reader of the bucket (triage, the gateway) must not fail on it.
    await ensureTroupeStreams(bus);
    const store = await KvStore.open(bus, BUCKETS.queued, Note);
    const raw = await new Kvm(bus.connection).open(BUCKETS.queued);
    await raw.put('t-garbage', '{"text": "cut sho');
    await expect(store.get('t-garbage')).resolves.toBeUndefined();
    expect(lines.filter((l) => l.level === 40).map((l) => [l.key, l.msg])).toEqual([
      ['t-garbage', 'ignoring a KV value that is not JSON'],
    ]);
  });
});

describe('KvStore without consumers', () => {
  it('lists keys from the stream’s info, making no consumer', async () => {
    await ensureTroupeStreams(bus);
    const store = await KvStore.open(bus, BUCKETS.approvals, Note);
    for (const key of ['demo.a', 'demo.b', 'gated.c']) await store.put(key, { text: key });
    let keys: string[] = [];
    const requests = await apiRequests(async () => (keys = await store.keys('demo.>')));
    expect(keys.sort()).toEqual(['demo.a', 'demo.b']);
    expect(await store.keys('other.>')).toEqual([]);
    expect(requests.some((s) => s.includes('.CONSUMER.'))).toBe(false);
  });

  it('watches a key by reading it: the latest value, and a bad one skipped quietly', async () => {
    await ensureTroupeStreams(bus);
    const store = await KvStore.open(bus, BUCKETS.approvals, Note);
    const raw = await new Kvm(bus.connection).open(BUCKETS.approvals);
    await store.put('demo.w', { text: 'first' });
    const seen: string[] = [];
    const requests = await apiRequests(async () => {
      const stop = await store.watch('demo.w', (entry) => seen.push(entry.value.text));
      expect(seen).toEqual(['first']);
      await raw.put('demo.w', '{"not":"a note"}');
      await store.put('demo.w', { text: 'second' });
      await expect.poll(() => seen, { timeout: 10_000 }).toEqual(['first', 'second']);
      stop();
    });
    expect(requests.some((s) => s.includes('.CONSUMER.'))).toBe(false);
    // A value that does not match is skipped without a warning at every look.
    expect(lines.filter((l) => l.level >= 40)).toEqual([]);
  });

  it('takes both of nats-server’s answers to a write that expected another revision as a lost compare', () => {
    for (const code of [10071, 10164]) {
      const answer = new JetStreamApiError({ code: 400, err_code: code, description: 'wrong last sequence' });
      expect(lostCompare(answer), String(code)).toBe(true);
    }
    expect(lostCompare(new JetStreamApiError({ code: 500, err_code: 10077, description: 'other' }))).toBe(
      false,
    );
  });
});
