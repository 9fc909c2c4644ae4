import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { type DeltaBatch, DeltaBatcher, type DeltaBatcherOptions } from '../../src/agent/deltaBatcher.ts';

let batches: DeltaBatch[];

beforeEach(() => {
  vi.useFakeTimers();
  batches = [];
});

afterEach(() => {
  vi.useRealTimers();
});

const batcher = (options: Partial<DeltaBatcherOptions> = {}) =>
  new DeltaBatcher({ intervalMs: 100, maxChars: 1_000, emit: (batch) => batches.push(batch), ...options });

describe('DeltaBatcher', () => {
  it('sends the text deltas of one interval as one batch when the interval ends', () => {
    const b = batcher();
    b.add({ type: 'text', text: 'Hel' });
    vi.advanceTimersByTime(40);
    b.add({ type: 'text', text: 'lo, ' });
    vi.advanceTimersByTime(40);
    b.add({ type: 'text', text: 'world' });
    expect(batches).toEqual([]);
    vi.advanceTimersByTime(19);
    expect(batches).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(batches).toEqual([{ seq: 0, text: 'Hello, world', toolCalls: [] }]);
  });

  it('times the interval from the first pending delta, not the latest', () => {
    const b = batcher();
    b.add({ type: 'text', text: 'a' });
    vi.advanceTimersByTime(90);
    b.add({ type: 'text', text: 'b' });
    vi.advanceTimersByTime(10);
    expect(batches.map((x) => x.text)).toEqual(['ab']);
  });

  it('starts a new batch for deltas after the interval', () => {
    const b = batcher();
    b.add({ type: 'text', text: 'one' });
    vi.advanceTimersByTime(100);
    b.add({ type: 'text', text: 'two' });
    vi.advanceTimersByTime(100);
    expect(batches).toEqual([
      { seq: 0, text: 'one', toolCalls: [] },
      { seq: 1, text: 'two', toolCalls: [] },
    ]);
  });

  it('sends a batch at once when it reaches maxChars', () => {
    const b = batcher({ maxChars: 10 });
    b.add({ type: 'text', text: '12345' });
    b.add({ type: 'text', text: '6789' });
    expect(batches).toEqual([]);
    b.add({ type: 'text', text: '0' });
    expect(batches).toEqual([{ seq: 0, text: '1234567890', toolCalls: [] }]);
  });

  it('counts tool-call argument characters toward maxChars', () => {
    const b = batcher({ maxChars: 8 });
    b.add({ type: 'tool_call', index: 0, id: 'c1', name: 'read_file', arguments: '{"pa' });
    expect(batches).toHaveLength(0);
    b.add({ type: 'tool_call', index: 0, arguments: 'th":' });
    expect(batches).toEqual([
      { seq: 0, text: '', toolCalls: [{ index: 0, id: 'c1', name: 'read_file', arguments: '{"path":' }] },
    ]);
  });

  it('starts counting afresh after an early flush, and cancels the flushed batch’s timer', () => {
    const b = batcher({ maxChars: 4 });
    b.add({ type: 'text', text: 'ab' });
    b.add({ type: 'text', text: 'cd' });
    expect(batches.map((x) => x.text)).toEqual(['abcd']);
    b.add({ type: 'text', text: 'e' });
    vi.advanceTimersByTime(99);
    expect(batches).toHaveLength(1);
    vi.advanceTimersByTime(1);
    expect(batches.map((x) => x.text)).toEqual(['abcd', 'e']);
    vi.advanceTimersByTime(1_000);
    expect(batches).toHaveLength(2);
  });

  it('joins adjacent argument pieces of the same tool call', () => {
    const b = batcher();
    b.add({ type: 'tool_call', index: 0, id: 'c1', name: 'read_file', arguments: '' });
    b.add({ type: 'tool_call', index: 0, arguments: '{"path"' });
    b.add({ type: 'tool_call', index: 0, arguments: ':"a.md"}' });
    b.flush();
    expect(batches).toEqual([
      {
        seq: 0,
        text: '',
        toolCalls: [{ index: 0, id: 'c1', name: 'read_file', arguments: '{"path":"a.md"}' }],
      },
    ]);
  });

  it('starts a new entry for another tool call, or for a piece that carries an id or name', () => {
    const b = batcher();
    b.add({ type: 'tool_call', index: 0, id: 'c1', name: 'read_file', arguments: '{"path":' });
    b.add({ type: 'tool_call', index: 0, arguments: '"a.md"}' });
    b.add({ type: 'tool_call', index: 1, id: 'c2', name: 'list_dir', arguments: '' });
    b.add({ type: 'tool_call', index: 1, arguments: '{}' });
    b.add({ type: 'tool_call', index: 1, name: '_more', arguments: '' });
    b.flush();
    expect(batches[0]?.toolCalls).toEqual([
      { index: 0, id: 'c1', name: 'read_file', arguments: '{"path":"a.md"}' },
      { index: 1, id: 'c2', name: 'list_dir', arguments: '{}' },
      { index: 1, name: '_more', arguments: '' },
    ]);
  });

  it('does not join pieces of one call that another call’s piece came between', () => {
    const b = batcher();
    b.add({ type: 'tool_call', index: 0, arguments: 'a' });
    b.add({ type: 'tool_call', index: 1, arguments: 'b' });
    b.add({ type: 'tool_call', index: 0, arguments: 'c' });
    b.flush();
    expect(batches[0]?.toolCalls).toEqual([
      { index: 0, arguments: 'a' },
      { index: 1, arguments: 'b' },
      { index: 0, arguments: 'c' },
    ]);
  });

  it('keeps text and tool calls of one interval in the same batch', () => {
    const b = batcher();
    b.add({ type: 'text', text: 'Let me look.' });
    b.add({ type: 'tool_call', index: 0, id: 'c1', name: 'read_file', arguments: '{}' });
    vi.advanceTimersByTime(100);
    expect(batches).toEqual([
      {
        seq: 0,
        text: 'Let me look.',
        toolCalls: [{ index: 0, id: 'c1', name: 'read_file', arguments: '{}' }],
      },
    ]);
  });

  it('numbers batches from 0, one more per batch sent', () => {
    const b = batcher({ maxChars: 3 });
    b.add({ type: 'text', text: 'abc' });
    b.add({ type: 'text', text: 'd' });
    b.flush();
    b.add({ type: 'text', text: 'e' });
    vi.advanceTimersByTime(100);
    expect(batches.map((x) => [x.seq, x.text])).toEqual([
      [0, 'abc'],
      [1, 'd'],
      [2, 'e'],
    ]);
  });

  it('sends what is pending on flush, before the interval ends, and nothing more when it ends', () => {
    const b = batcher();
    b.add({ type: 'text', text: 'partial' });
    b.flush();
    expect(batches).toEqual([{ seq: 0, text: 'partial', toolCalls: [] }]);
    vi.advanceTimersByTime(1_000);
    expect(batches).toHaveLength(1);
  });

  it('sends nothing, and uses up no sequence number, when flushed with nothing pending', () => {
    const b = batcher();
    b.flush();
    b.flush();
    vi.advanceTimersByTime(1_000);
    expect(batches).toEqual([]);
    b.add({ type: 'text', text: 'x' });
    b.flush();
    b.flush();
    expect(batches).toEqual([{ seq: 0, text: 'x', toolCalls: [] }]);
  });

  it('defaults to a 100 ms interval', () => {
    const b = new DeltaBatcher({ emit: (batch) => batches.push(batch) });
    b.add({ type: 'text', text: 'x' });
    vi.advanceTimersByTime(99);
    expect(batches).toHaveLength(0);
    vi.advanceTimersByTime(1);
    expect(batches).toHaveLength(1);
  });
});
