import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  decodeMessage,
  exceedsDepth,
  formatPath,
  MAX_MESSAGE_DEPTH,
  parseMessage,
  TaskSubmission,
  validateMessage,
} from '../src/index.ts';

const encode = (value: unknown): Uint8Array => new TextEncoder().encode(JSON.stringify(value));

describe('parseMessage', () => {
  it('decodes UTF-8 JSON bytes into the schema type', () => {
    expect(parseMessage(TaskSubmission, encode({ goal: 'écrire ✓' }))).toEqual({
      ok: true,
      value: { goal: 'écrire ✓' },
    });
  });

  it('accepts text as well as bytes', () => {
    expect(parseMessage(TaskSubmission, '{"goal":"g"}')).toEqual({ ok: true, value: { goal: 'g' } });
  });

  it('returns the parsed value, with defaults and transforms applied', () => {
    const result = parseMessage(TaskSubmission, encode({ goal: '  padded  ' }));
    expect(result.ok && result.value.goal).toBe('padded');
  });

  it('refuses bytes that are not UTF-8 without throwing', () => {
    const bytes = new Uint8Array([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d]);
    expect(parseMessage(TaskSubmission, bytes)).toEqual({
      ok: false,
      reason: 'payload is not valid UTF-8',
      issues: [],
    });
  });

  it('refuses a truncated multi-byte sequence', () => {
    const bytes = new Uint8Array([...new TextEncoder().encode('{"goal":"'), 0xe2, 0x9c]);
    expect(parseMessage(TaskSubmission, bytes)).toMatchObject({
      ok: false,
      reason: 'payload is not valid UTF-8',
    });
  });

  it.each([
    ['empty bytes', new Uint8Array()],
    ['plain text', new TextEncoder().encode('write hello.md')],
    ['a truncated object', new TextEncoder().encode('{"goal": "g"')],
  ])('refuses %s as not JSON, with the parser message', (_label, bytes) => {
    const result = parseMessage(TaskSubmission, bytes);
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.reason).toMatch(/^payload is not JSON: \S/);
    expect(result.issues).toEqual([]);
  });

  it('lists schema failures with dotted paths and index brackets', () => {
    const Schema = z.object({ input: z.object({ files: z.array(z.string()) }) });
    const result = parseMessage(Schema, encode({ input: { files: [1, 'b.ts', false] } }));
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.issues.map((issue) => issue.path)).toEqual(['input.files[0]', 'input.files[2]']);
    expect(result.reason).toMatch(
      /^payload failed validation: input\.files\[0\]: .+; input\.files\[2\]: .+$/,
    );
  });

  it('reports a problem with the whole message without a path prefix', () => {
    const result = parseMessage(TaskSubmission, encode(['not', 'an', 'object']));
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.issues).toHaveLength(1);
    expect(result.issues[0]?.path).toBe('');
    expect(result.reason).toBe(`payload failed validation: ${result.issues[0]?.message}`);
  });

  it('names the field and carries the schema message', () => {
    const result = parseMessage(TaskSubmission, encode({ goal: ' ' }));
    expect(result).toEqual({
      ok: false,
      reason: 'payload failed validation: goal: must not be empty',
      issues: [{ path: 'goal', message: 'must not be empty' }],
    });
  });
});

/** `{"input":{"n":{"n":…}}}` with `levels` levels of objects in all. */
const nested = (levels: number): string =>
  `${'{"n":'.repeat(levels - 1)}{}${'}'.repeat(levels - 1)}`.replace(/^\{"n":/, '{"goal":"g","input":');

describe('parse limits', () => {
  it('refuses a payload nested deeper than the default limit without walking it recursively', () => {
    const deep = nested(200_000);
    const result = parseMessage(TaskSubmission, deep);
    expect(result).toEqual({
      ok: false,
      reason: `payload nests objects and arrays more than ${MAX_MESSAGE_DEPTH} levels deep`,
      issues: [],
      limit: 'maxDepth',
    });
  });

  it('accepts a payload at the depth limit and refuses one level more', () => {
    expect(parseMessage(TaskSubmission, nested(10), { maxDepth: 10 }).ok).toBe(true);
    expect(parseMessage(TaskSubmission, nested(11), { maxDepth: 10 })).toMatchObject({
      ok: false,
      reason: 'payload nests objects and arrays more than 10 levels deep',
    });
  });

  it('refuses a payload larger than maxBytes, counting UTF-8 bytes', () => {
    const text = JSON.stringify({ goal: 'é'.repeat(60) });
    expect(parseMessage(TaskSubmission, text, { maxBytes: 200 }).ok).toBe(true);
    expect(parseMessage(TaskSubmission, text, { maxBytes: 100 })).toEqual({
      ok: false,
      reason: `payload is ${new TextEncoder().encode(text).length} bytes; the limit is 100`,
      issues: [],
      limit: 'maxBytes',
    });
  });

  it('judges depth by nesting, whether a payload has few brackets or many (in strings or not)', () => {
    // Fewer brackets than the limit: no value can nest deeper, and none is refused.
    expect(parseMessage(TaskSubmission, nested(3), { maxDepth: 3 }).ok).toBe(true);
    expect(parseMessage(TaskSubmission, nested(4), { maxDepth: 3 })).toMatchObject({ limit: 'maxDepth' });
    // Many brackets, shallow: the ones in strings and side by side do not nest.
    const input = Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`k${i}`, []]));
    const wide = JSON.stringify({ goal: '{['.repeat(50), input });
    expect(parseMessage(TaskSubmission, wide, { maxDepth: 3 }).ok).toBe(true);
    expect(parseMessage(TaskSubmission, wide, { maxDepth: 2 })).toMatchObject({ limit: 'maxDepth' });
  });

  it.each([
    [1, 0],
    ['text', 0],
    [{}, 1],
    [[], 1],
    [{ a: [1, { b: [] }] }, 4],
    [[[[[]]]], 4],
  ] as [unknown, number][])('measures %j as %i levels', (value, levels) => {
    expect(exceedsDepth(value, levels)).toBe(false);
    if (levels > 0) expect(exceedsDepth(value, levels - 1)).toBe(true);
  });
});

describe('decodeMessage and validateMessage', () => {
  it('decode within the limits once, then validate against whichever schema fits', () => {
    const decoded = decodeMessage('{"heartbeat":true,"stepId":"s"}');
    expect(decoded).toEqual({ ok: true, value: { heartbeat: true, stepId: 's' } });
    const Heartbeat = z.strictObject({ heartbeat: z.literal(true), stepId: z.string() });
    expect(validateMessage(Heartbeat, decoded.ok ? decoded.value : undefined)).toEqual({
      ok: true,
      value: { heartbeat: true, stepId: 's' },
    });
    expect(validateMessage(z.strictObject({ ok: z.boolean() }), { heartbeat: true })).toMatchObject({
      ok: false,
      reason: expect.stringContaining('payload failed validation'),
    });
  });

  it('refuse what parseMessage refuses before any schema: not JSON, too deep, too big', () => {
    expect(decodeMessage('{nope')).toMatchObject({ ok: false, reason: expect.stringContaining('not JSON') });
    expect(
      decodeMessage('['.repeat(MAX_MESSAGE_DEPTH + 1) + ']'.repeat(MAX_MESSAGE_DEPTH + 1)),
    ).toMatchObject({
      ok: false,
      limit: 'maxDepth',
    });
    expect(decodeMessage('"abcdef"', { maxBytes: 4 })).toMatchObject({ ok: false, limit: 'maxBytes' });
  });
});

describe('formatPath', () => {
  it.each([
    [[], ''],
    [['goal'], 'goal'],
    [[0], '[0]'],
    [['input', 'files', 0], 'input.files[0]'],
    [['a', 0, 1, 'b'], 'a[0][1].b'],
    [['metadata', '0'], 'metadata.0'],
  ] as [PropertyKey[], string][])('formats %j as %j', (path, expected) => {
    expect(formatPath(path)).toBe(expected);
  });
});
