import type { WorkflowRecord } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { formatDuration, parseDuration } from '../src/format/duration.ts';
import { taskDuration } from '../src/workflowRecords.ts';

describe('parseDuration', () => {
  it.each([
    ['30s', 30_000],
    ['5m', 300_000],
    ['2h', 7_200_000],
    ['1d', 86_400_000],
    ['500ms', 500],
    ['1h30m', 5_400_000],
    ['1.5h', 5_400_000],
    [' 10S ', 10_000],
  ])('reads %s as %i ms', (text, ms) => {
    expect(parseDuration(text)).toBe(ms);
  });

  it.each(['', '5', 'm', '5x', '-5m', '5 m', '1h 30m', '0s', 'soon', '1e3s', '5m30'])(
    'refuses %j',
    (text) => {
      expect(parseDuration(text)).toBeUndefined();
    },
  );
});

describe('formatDuration', () => {
  it.each([
    [0, '0.0 s'],
    [-20, '0.0 s'],
    [340, '0.3 s'],
    [9_940, '9.9 s'],
    [9_960, '10 s'],
    [12_400, '12 s'],
    [59_600, '1 min 0 s'],
    [245_000, '4 min 5 s'],
    [7_380_000, '2 h 3 min'],
    [273_600_000, '3 d 4 h'],
  ])('shows %i ms as %s', (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
  });
});

describe('taskDuration', () => {
  const record = (extra: Partial<WorkflowRecord>): WorkflowRecord => ({
    taskId: 't-1',
    pipeline: 'demo',
    streamSequence: 1,
    status: 'completed',
    state: 'completed',
    goal: 'g',
    round: 1,
    usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
    createdAt: '2026-11-29T12:00:00.000Z',
    updatedAt: '2026-11-29T12:00:09.000Z',
    ...extra,
  });
  const later = Date.parse('2026-11-30T12:00:00.000Z');

  it('measures a running task so far', () => {
    expect(taskDuration(record({ status: 'running' }), later)).toEqual({ ms: 86_400_000, finished: false });
  });

  it('measures an ended task to its last update, whenever it is asked', () => {
    expect(taskDuration(record({ status: 'cancelled' }), later)).toEqual({ ms: 9_000, finished: true });
  });
});
