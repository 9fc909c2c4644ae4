import { Kvm } from '@nats-io/kv';
import { BUCKETS } from '@troupe/protocol';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ZodError, z } from 'zod';
import { KvStore } from '../../src/durable/kvStore.ts';
import { ensureTroupeStreams } from '../../src/transport/jetstreamSetup.ts';
import { NatsBus } from '../../src/transport/natsBus.ts';
import { captureLogger, type LogLine } from '../transport/natsFixture.ts';

// The workflow records and the journal are written unparsed outside tests (kvStore.ts OWN_RECORDS): what Troupe's
// own code built from values parsed where they arrived. These tests hold that nothing from outside gets in that way.

let nats: TestNats;
let bus: NatsBus;
let lines: LogLine[];

beforeEach(async () => {
  nats = await startTestNats();
  const capture = captureLogger();
  lines = capture.lines;
  bus = await NatsBus.connect({ servers: nats.url, name: 'own-records-test', logger: capture.logger });
  await ensureTroupeStreams(bus);
});

afterEach(async () => {
  vi.unstubAllEnvs();
  await bus?.close();
  await nats?.stop();
});

const Note = z.object({ text: z.string().min(1) });
const warnings = () => lines.filter((l) => l.level === 40).map((l) => [l.key, l.msg]);

describe('writes of our own records, as production runs them (TROUPE_STRICT unset)', () => {
  beforeEach(() => vi.stubEnv('TROUPE_STRICT', ''));

  it('store a workflow record as built, and read it back parsed', async () => {
    const store = await KvStore.open(bus, BUCKETS.workflows, Note);
    await store.put('t-1', { text: 'kept' });
    await expect(store.get('t-1')).resolves.toMatchObject({ value: { text: 'kept' } });
  });

  it('still refuse, on reading, a record that does not match: one an older version or another client stored', async () => {
    const store = await KvStore.open(bus, BUCKETS.workflows, Note);
    await new Kvm(bus.connection).open(BUCKETS.workflows).then((raw) => raw.put('t-old', '{"text":""}'));
    // Even one our own code got wrong is refused where it is read, never taken as valid.
    await store.put('t-bug', { text: '' });
    await expect(store.get('t-old')).resolves.toBeUndefined();
    await expect(store.get('t-bug')).resolves.toBeUndefined();
    expect(warnings()).toEqual([
      ['t-old', 'ignoring a KV value that does not match its schema'],
      ['t-bug', 'ignoring a KV value that does not match its schema'],
    ]);
  });

  it('are only those of workflows and the journal: a bucket holding what people send parses every write', async () => {
    for (const bucket of [BUCKETS.approvals, BUCKETS.sessions, BUCKETS.queued, BUCKETS.memory]) {
      const store = await KvStore.open(bus, bucket, Note);
      await expect(store.put('k', { text: '' })).rejects.toBeInstanceOf(ZodError);
      await expect(store.create('k2', { text: '' })).rejects.toBeInstanceOf(ZodError);
    }
  });
});

describe('writes of our own records in tests (TROUPE_STRICT=1)', () => {
  it('are parsed, and refused when the parse would change them', async () => {
    vi.stubEnv('TROUPE_STRICT', '1');
    const store = await KvStore.open(bus, BUCKETS.journal, Note);
    await expect(store.put('j', { text: '' })).rejects.toBeInstanceOf(ZodError);
    const undeclared = { text: 'x', extra: true } as { text: string };
    await expect(store.put('j', undeclared)).rejects.toThrow(/journal j was built unlike its schema/);
  });
});
