import { DEFAULT_TASK_LIMITS, fillInput, type ValueRef } from '@troupe/protocol';
import { ValueStoreError } from '@troupe/runtime';
import { describe, expect, it } from 'vitest';
import { cutInput, INPUT_KEEP_BYTES, readStoredInput } from '../src/intake/storedInput.ts';

const ref = (name = 't-1.input.0123456789abcdef', bytes = 1): ValueRef => ({
  bucket: 'troupe-inputs-demo',
  name,
  bytes,
  sha256: 'a'.repeat(64),
});
const size = (value: unknown) => Buffer.byteLength(JSON.stringify(value));

describe('cutInput', () => {
  it('keeps a small input whole', () => {
    const input = { a: 'x'.repeat(1_000), n: 3 };
    expect(cutInput(input, ref())).toEqual({ input });
  });

  it('cuts the largest keys first, to previews, until the rest fits, and fills them back from the whole', () => {
    const whole = {
      book: 'b'.repeat(3_000_000),
      table: Array.from({ length: 20_000 }, (_, i) => ({ row: i })),
      notes: 'n'.repeat(20_000),
      priority: 'high',
    };
    const kept = cutInput(whole, ref());
    expect(kept?.cut?.keys).toEqual(['book', 'table']);
    expect(size(kept?.input)).toBeLessThanOrEqual(INPUT_KEEP_BYTES);
    // The small keys stay as they were, for conditions to read.
    expect(kept?.input.priority).toBe('high');
    expect(kept?.input.notes).toBe(whole.notes);
    expect(kept?.input.book).toMatch(
      /^b{8192}\n…\[cut: showing 8192 of 3000002 bytes of input\.book; the whole input is object "t-1\.input\.0123456789abcdef" in NATS object store troupe-inputs-demo/,
    );
    expect(kept?.input.table).toMatch(/^\[\{"row":0\}/);
    const cut = kept?.cut;
    if (!cut) throw new Error('expected a cut');
    expect(fillInput(kept.input, cut, JSON.stringify(whole))).toEqual(whole);
  });

  it('gives up on an input of many small keys that no cut brings within the limit', () => {
    const many = Object.fromEntries(Array.from({ length: 20_000 }, (_, i) => [`k${i}`, 'v'.repeat(10)]));
    expect(cutInput(many, ref())).toBeUndefined();
  });
});

describe('readStoredInput', () => {
  const stored = (text: string) => ({ read: async () => text });

  it("refuses another pipeline's bucket, another task's object, and a size past the limit, reading nothing", async () => {
    const never = {
      read: async (): Promise<string> => {
        throw new Error('read');
      },
    };
    const other = { ...ref(), bucket: 'troupe-inputs-other' };
    expect(await readStoredInput(never, 'demo', 't-1', other, DEFAULT_TASK_LIMITS)).toMatchObject({
      ok: false,
      reason: expect.stringMatching(
        /names bucket troupe-inputs-other; a task of demo has its input in troupe-inputs-demo/,
      ),
    });
    expect(
      await readStoredInput(never, 'demo', 't-1', ref('t-2.input.0123456789abcdef'), DEFAULT_TASK_LIMITS),
    ).toMatchObject({ ok: false, reason: expect.stringMatching(/task t-1's input is named t-1\.input\./) });
    // `t-1.input.` is not a prefix of `t-10.input.…`'s owner's: the dot ends the id.
    expect(
      await readStoredInput(never, 'demo', 't-1', ref('t-10.input.0123456789abcdef'), DEFAULT_TASK_LIMITS),
    ).toMatchObject({ ok: false });
    const big = ref(undefined, DEFAULT_TASK_LIMITS.maxInputBytes + 1);
    expect(await readStoredInput(never, 'demo', 't-1', big, DEFAULT_TASK_LIMITS)).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/--max-input-bytes/),
    });
  });

  it('refuses an input gone or not an object, and leaves one out of reach to a later delivery', async () => {
    const gone = {
      read: async (): Promise<string> => {
        throw new ValueStoreError('value_missing', 'value troupe-inputs-demo/t-1.input.x is not stored');
      },
    };
    expect(await readStoredInput(gone, 'demo', 't-1', ref(), DEFAULT_TASK_LIMITS)).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/cannot read the task's stored input: value .* is not stored/),
    });
    expect(await readStoredInput(stored('[1]'), 'demo', 't-1', ref(), DEFAULT_TASK_LIMITS)).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/not a JSON object/),
    });
    const away = {
      read: async (): Promise<string> => {
        throw new ValueStoreError('value_unavailable', 'timeout');
      },
    };
    await expect(readStoredInput(away, 'demo', 't-1', ref(), DEFAULT_TASK_LIMITS)).rejects.toThrow('timeout');
    expect(await readStoredInput(stored('{"a":1}'), 'demo', 't-1', ref(), DEFAULT_TASK_LIMITS)).toEqual({
      ok: true,
      input: { a: 1 },
    });
  });
});
