import { MemoryKv } from '@troupe/testkit';
import { describe, expect, it, vi } from 'vitest';
import { throughOutages } from '../../src/durable/kvStore.ts';
import { JournalEntry, StepJournal } from '../../src/durable/stepJournal.ts';

const key = StepJournal.toolKey('task-1.code.1', 1, 0);
const now = new Date('2025-01-01T00:00:00Z');

describe('StepJournal.claimToolCall', () => {
  it('claims a call expected new with one write and no read', async () => {
    const kv = new MemoryKv(JournalEntry);
    const journal = new StepJournal(kv);
    const expectNew = { expectNew: true };

    expect(await journal.claimToolCall(key, 'append', '{"line":"one"}', 'run-1', now, expectNew)).toEqual({
      state: 'new',
    });
    expect(kv.gets).toBe(0);
    expect(kv.writes).toBe(1);

    // Expected new and found taken: what is there still decides.
    expect(await journal.claimToolCall(key, 'append', '{"line":"one"}', 'run-2', now, expectNew)).toEqual({
      state: 'in_doubt',
      startedAt: now.toISOString(),
    });
  });

  it('reads first when the call may have run before (its reply was replayed)', async () => {
    const kv = new MemoryKv(JournalEntry);
    const journal = new StepJournal(kv);

    expect(await journal.claimToolCall(key, 'append', '{"line":"one"}', 'run-1', now)).toEqual({
      state: 'new',
    });
    expect(kv.gets).toBe(1);
    expect(await journal.claimToolCall(key, 'append', '{"line":"one"}', 'run-2', now)).toMatchObject({
      state: 'in_doubt',
    });
    // One read and no write for a call found claimed.
    expect(kv.gets).toBe(2);
    expect(kv.writes).toBe(1);
  });

  it('reads what is there when the key is taken: its own claim, another run’s, a result, another call', async () => {
    const journal = new StepJournal(new MemoryKv(JournalEntry));
    await journal.claimToolCall(key, 'append', '{"line":"one"}', 'run-1', now);

    expect(await journal.claimToolCall(key, 'append', '{"line":"one"}', 'run-1', now)).toEqual({
      state: 'new',
    });
    expect(await journal.claimToolCall(key, 'append', '{"line":"one"}', 'run-2', now)).toEqual({
      state: 'in_doubt',
      startedAt: now.toISOString(),
    });
    await journal.recordToolResult(
      key,
      '{"line":"one"}',
      { callId: 'c', tool: 'append', ok: true, output: 'ok', decision: 'allow', durationMs: 1 },
      now,
    );
    expect(await journal.claimToolCall(key, 'append', '{"line":"one"}', 'run-2', now)).toEqual({
      state: 'done',
      result: { ok: true, output: 'ok', decision: 'allow' },
    });
    expect(await journal.claimToolCall(key, 'append', '{"line":"two"}', 'run-3', now)).toEqual({
      state: 'new',
    });
  });
});

describe('StepJournal.recordedTurn', () => {
  it('reads a turn once and matches it to its conversation later', async () => {
    const kv = new MemoryKv(JournalEntry);
    const journal = new StepJournal(kv);
    const modelKey = StepJournal.modelKey('task-1.code.1', 1);
    const conversation = [{ role: 'user' as const, content: 'write a line' }];
    await journal.recordModelReply(
      modelKey,
      conversation,
      {
        content: 'done',
        toolCalls: [],
        usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0 },
        costUsd: 0,
        finishReason: 'stop',
        provider: 'scripted',
        model: 'scripted',
        durationMs: 1,
      },
      now,
    );
    kv.gets = 0;

    const turn = await journal.recordedTurn(modelKey);

    expect(turn.reply(conversation)).toMatchObject({ content: 'done' });
    expect(turn.reply([{ role: 'user', content: 'another conversation' }])).toBeUndefined();
    expect(turn.told).toBeUndefined();
    expect(kv.gets).toBe(1);
  });
});

describe('StepJournal.recordTold', () => {
  const modelKey = StepJournal.modelKey('task-1.code.1', 2);
  const conversation = [{ role: 'user' as const, content: 'write a line' }];
  const at = '2026-12-06T00:00:00.000Z';
  const m1 = { id: 'm-1', text: 'use v2', at };
  const m2 = { id: 'm-2', text: 'and cite it', at };

  it('writes what was told before a turn once, with one write: a second run takes the first one’s', async () => {
    const kv = new MemoryKv(JournalEntry);
    const journal = new StepJournal(kv);
    expect(await journal.recordTold(modelKey, [m1], conversation, now)).toEqual([m1]);
    expect([kv.gets, kv.writes]).toEqual([0, 1]);
    expect(await journal.recordTold(modelKey, [m1, m2], conversation, now)).toEqual([m1]);
    expect(await kv.get(modelKey)).toMatchObject({ value: { kind: 'told', messages: [m1] } });
  });

  it('gives nothing at a turn a reply answered with nothing told, and takes over one that answered another conversation', async () => {
    const journal = new StepJournal(new MemoryKv(JournalEntry));
    const reply = {
      content: 'done',
      toolCalls: [],
      usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0 },
      costUsd: 0,
      finishReason: 'stop',
      provider: 'scripted',
      model: 'scripted',
      durationMs: 1,
    };
    await journal.recordModelReply(modelKey, conversation, reply, now);
    expect(await journal.recordTold(modelKey, [m1], conversation, now)).toEqual([]);
    const changed = [{ role: 'user' as const, content: 'write two lines' }];
    expect(await journal.recordTold(modelKey, [m1], changed, now)).toEqual([m1]);
    // The reply to the conversation with the message replaces the record and keeps it.
    const withTold = [...changed, { role: 'user' as const, content: 'use v2' }];
    await journal.recordModelReply(modelKey, withTold, reply, now, [m1]);
    const turn = await journal.recordedTurn(modelKey);
    expect(turn.told).toEqual([m1]);
    expect(turn.reply(withTold)).toMatchObject({ content: 'done' });
  });

  it('lets one reply replace what was told: two runs that read the same told messages go on from the same reply', async () => {
    const kv = new MemoryKv(JournalEntry);
    const journal = new StepJournal(kv);
    await journal.recordTold(modelKey, [m1], conversation, now);
    const withTold = [...conversation, { role: 'user' as const, content: 'use v2' }];
    const replyOf = (content: string, tool: string) => ({
      content,
      toolCalls: [{ id: `call-${tool}`, name: tool, arguments: '{}' }],
      usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0 },
      costUsd: 0,
      finishReason: 'tool_calls',
      provider: 'scripted',
      model: 'scripted',
      durationMs: 1,
    });
    // A run thought dead and its resend both asked the model after the same told record, and record at once.
    const [first, second] = await Promise.all([
      journal.recordModelReply(modelKey, withTold, replyOf('one', 'append'), now, [m1]),
      journal.recordModelReply(modelKey, withTold, replyOf('two', 'delete'), now, [m1]),
    ]);
    expect(second.toolCalls).toEqual(first.toolCalls);
    expect([first.journaled, second.journaled].filter(Boolean)).toHaveLength(1);
    const standing = (await journal.recordedTurn(modelKey)).reply(withTold);
    expect(standing?.content).toBe(first.content);
  });

  it('keeps what was told before a turn from a reply to a conversation without it (a run that had not heard it)', async () => {
    const kv = new MemoryKv(JournalEntry);
    const journal = new StepJournal(kv);
    await journal.recordTold(modelKey, [m1], conversation, now);
    const reply = {
      content: 'done',
      toolCalls: [],
      usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0 },
      costUsd: 0,
      finishReason: 'stop',
      provider: 'scripted',
      model: 'scripted',
      durationMs: 1,
    };
    // The run goes on with its reply, unrecorded; the turn still puts the message there for every later run.
    expect(await journal.recordModelReply(modelKey, conversation, reply, now)).toMatchObject({
      content: 'done',
    });
    expect((await journal.recordedTurn(modelKey)).told).toEqual([m1]);
    // Nor does it replace a reply that read them (a resumed run whose read of the turn failed, say).
    const withTold = [...conversation, { role: 'user' as const, content: 'use v2' }];
    await journal.recordModelReply(modelKey, withTold, { ...reply, content: 'read v2' }, now, [m1]);
    await journal.recordModelReply(modelKey, conversation, reply, now);
    const turn = await journal.recordedTurn(modelKey);
    expect(turn.told).toEqual([m1]);
    expect(turn.reply(withTold)?.content).toBe('read v2');
  });
});

describe('throughOutages', () => {
  const outage = () => Object.assign(new Error('timed out'), { name: 'TimeoutError' });

  it('tries again after 250 ms, then 500 ms, as before the first try went without the retry machinery', async () => {
    vi.useFakeTimers();
    try {
      let tries = 0;
      const result = throughOutages(async () => {
        tries++;
        if (tries < 3) throw outage();
        return 'stored';
      });
      await vi.advanceTimersByTimeAsync(249);
      expect(tries).toBe(1);
      await vi.advanceTimersByTimeAsync(1);
      expect(tries).toBe(2);
      await vi.advanceTimersByTimeAsync(499);
      expect(tries).toBe(2);
      await vi.advanceTimersByTimeAsync(1);
      await expect(result).resolves.toBe('stored');
      expect(tries).toBe(3);
    } finally {
      vi.useRealTimers();
    }
  });

  it('gives up after 9 tries, 11.75 s of waits, and fails at once on what is not an outage', async () => {
    vi.useFakeTimers();
    try {
      let tries = 0;
      const result = throughOutages(async () => {
        tries++;
        throw outage();
      });
      const failed = expect(result).rejects.toThrow('timed out');
      await vi.advanceTimersByTimeAsync(11_749);
      expect(tries).toBe(8);
      await vi.advanceTimersByTimeAsync(1);
      await failed;
      expect(tries).toBe(9);
    } finally {
      vi.useRealTimers();
    }
    let tries = 0;
    await expect(
      throughOutages(async () => {
        tries++;
        throw new Error('bad value');
      }),
    ).rejects.toThrow('bad value');
    expect(tries).toBe(1);
  });
});

describe('StepJournal: records too large for a KV value', () => {
  /** An object store in memory, as `ValueStore` keeps values: by name, read back by reference. */
  const memoryValues = () => {
    const objects = new Map<string, string>();
    return {
      objects,
      store: async (pipeline: string, name: string, text: string) => {
        objects.set(name, text);
        return {
          bucket: `troupe-values-${pipeline}`,
          name,
          bytes: Buffer.byteLength(text),
          sha256: 'a'.repeat(64),
        };
      },
      read: async (ref: { name: string }) => objects.get(ref.name) ?? '',
    };
  };
  const big = 'w'.repeat(2 * 1024 * 1024);

  it('keeps a 2 MB claim and result in the object store and reads them back by key', async () => {
    const kv = new MemoryKv(JournalEntry);
    const values = memoryValues();
    const journal = new StepJournal(kv).forPipeline('demo', values);
    const args = JSON.stringify({ path: 'big.md', content: big });

    expect(await journal.claimToolCall(key, 'write_file', args, 'run-1', now)).toEqual({ state: 'new' });
    // What the bucket holds is small: a reference, named from the key and the record's digest.
    const stub = (await kv.get(`demo.${key}`))?.value;
    expect(stub).toMatchObject({ kind: 'stored', ref: { bucket: 'troupe-values-demo' } });
    expect(JSON.stringify(stub).length).toBeLessThan(1_000);
    expect(await journal.claimToolCall(key, 'write_file', args, 'run-2', now)).toMatchObject({
      state: 'in_doubt',
    });

    await journal.recordToolResult(
      key,
      args,
      { callId: 'c-1', tool: 'write_file', ok: true, output: 'wrote', decision: 'allow', durationMs: 1 },
      now,
    );
    expect(await journal.claimToolCall(key, 'write_file', args, 'run-3', now)).toMatchObject({
      state: 'done',
      result: { output: 'wrote' },
    });
    expect((await journal.entry(key))?.kind).toBe('tool.result');
    expect(values.objects.size).toBe(2);
  });

  it('keeps small records in the bucket, and refuses to read a stored one without the object store', async () => {
    const kv = new MemoryKv(JournalEntry);
    const values = memoryValues();
    const journal = new StepJournal(kv).forPipeline('demo', values);
    await journal.claimToolCall(key, 'append', '{"line":"one"}', 'run-1', now);
    expect((await kv.get(`demo.${key}`))?.value.kind).toBe('tool.started');
    expect(values.objects.size).toBe(0);

    await journal.claimToolCall('task-1.code.1.1.1', 'write_file', big, 'run-1', now);
    await expect(new StepJournal(kv).forPipeline('demo').entry('task-1.code.1.1.1')).rejects.toThrow(
      /is kept in troupe-values-demo/,
    );
  });
});
