import { createHash } from 'node:crypto';
import { jetstreamManager } from '@nats-io/jetstream';
import { startTestNats, type TestNats } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ValueStore } from '../../src/durable/valueStore.ts';
import { NatsBus } from '../../src/transport/natsBus.ts';
import { captureLogger } from '../transport/natsFixture.ts';

let nats: TestNats;
let bus: NatsBus;

beforeAll(async () => {
  nats = await startTestNats();
  bus = await NatsBus.connect({ servers: nats.url, name: 'values-test', logger: captureLogger().logger });
});

afterAll(async () => {
  await bus?.close();
  await nats?.stop();
});

/** A 5 MB value that is not one byte repeated, so a chunk read out of order would show. */
const large = (bytes: number): string =>
  Array.from({ length: Math.ceil(bytes / 16) }, (_, i) => `${String(i).padStart(15, '0')}\n`)
    .join('')
    .slice(0, bytes);

const messagesOf = async (bucket: string) =>
  (await (await jetstreamManager(bus.connection)).streams.info(`OBJ_${bucket}`)).state.messages;

describe('ValueStore', () => {
  it('gives a value under the threshold back as it is, and stores nothing', async () => {
    const values = new ValueStore(bus);
    const text = 'x'.repeat(values.offloadBytes);

    expect(await values.offload('small', 'task-1.a.1.output', text)).toEqual({ text });
    const jsm = await jetstreamManager(bus.connection);
    await expect(jsm.streams.info('OBJ_troupe-values-small')).rejects.toThrow(/stream not found/);
  });

  it('stores a 5 MB value, keeps a preview that says where the whole is, and reads it back whole', async () => {
    const values = new ValueStore(bus, { maxAgeMs: 3_600_000 });
    const text = large(5 * 1024 * 1024);
    await values.ensureBucket('demo');

    const { text: preview, ref } = await values.offload('demo', 'task-1.write.1.output', text);

    const sha256 = createHash('sha256').update(text).digest('hex');
    expect(ref).toEqual({
      bucket: 'troupe-values-demo',
      name: `task-1.write.1.output.${sha256.slice(0, 16)}`,
      bytes: 5 * 1024 * 1024,
      sha256,
    });
    expect(preview.startsWith(text.slice(0, 8 * 1024))).toBe(true);
    expect(preview).toContain(
      `[cut: showing 8192 of 5242880 bytes; the whole is object "task-1.write.1.output.${sha256.slice(0, 16)}" in NATS object store troupe-values-demo`,
    );
    expect(await values.read(ref as NonNullable<typeof ref>)).toBe(text);
    // The bucket keeps values as long as tasks are kept.
    const jsm = await jetstreamManager(bus.connection);
    expect((await jsm.streams.info('OBJ_troupe-values-demo')).config.max_age).toBe(3_600_000 * 1_000_000);
  });

  it('writes a value offloaded again under the same name once', async () => {
    const values = new ValueStore(bus);
    const text = large(600 * 1024);
    await values.ensureBucket('again');
    await values.offload('again', 'task-2.write.1.output', text);
    const before = await messagesOf('troupe-values-again');

    const second = await values.offload('again', 'task-2.write.1.output', text);

    expect(await messagesOf('troupe-values-again')).toBe(before);
    expect(await new ValueStore(bus).read(second.ref as NonNullable<typeof second.ref>)).toBe(text);
  });

  it('keeps both values of a step that ran twice and made two: each reference reads its own', async () => {
    const values = new ValueStore(bus);
    await values.ensureBucket('twice');
    const first = await values.offload('twice', 'task-6.write.1.output', large(300 * 1024));
    const second = await values.offload('twice', 'task-6.write.1.output', `${large(300 * 1024)} and more`);

    expect(second.ref?.name).not.toBe(first.ref?.name);
    expect(await values.read(first.ref as NonNullable<typeof first.ref>)).toBe(large(300 * 1024));
    expect(await values.read(second.ref as NonNullable<typeof second.ref>)).toBe(
      `${large(300 * 1024)} and more`,
    );
  });

  it('cuts a preview between characters, never inside one', async () => {
    const values = new ValueStore(bus, { offloadBytes: 10, previewBytes: 5 });
    await values.ensureBucket('utf');
    const { text } = await values.offload('utf', 'task-3.a.1.output', 'ééééééééé');

    expect(text.startsWith('éé\n…[cut: showing 4 of 18 bytes')).toBe(true);
  });

  it('refuses to write where no coordinator made the bucket, saying who makes it', async () => {
    await expect(
      new ValueStore(bus).offload('unmade', 'task-5.a.1.output', large(300 * 1024)),
    ).rejects.toMatchObject({
      code: 'value_unavailable',
      message: expect.stringContaining(
        'troupe-values-unmade does not exist: a coordinator running its pipeline makes it',
      ),
    });
    const jsm = await jetstreamManager(bus.connection);
    await expect(jsm.streams.info('OBJ_troupe-values-unmade')).rejects.toThrow(/stream not found/);
  });

  it('refuses a value that is gone, or that is not what its reference says, with a code', async () => {
    const values = new ValueStore(bus);
    await values.ensureBucket('demo');
    const { ref } = await values.offload('demo', 'task-4.a.1.output', large(300 * 1024));
    const stored = ref as NonNullable<typeof ref>;

    await expect(values.read({ ...stored, name: 'task-4.nothing' })).rejects.toMatchObject({
      name: 'ValueStoreError',
      code: 'value_missing',
    });
    await expect(values.read({ ...stored, sha256: '0'.repeat(64) })).rejects.toMatchObject({
      code: 'value_corrupt',
      message: expect.stringContaining('not the 307200 bytes with SHA-256 0000'),
    });
    await expect(values.read({ ...stored, bucket: 'troupe-values-nowhere' })).rejects.toMatchObject({
      code: 'value_missing',
    });
  });
});
