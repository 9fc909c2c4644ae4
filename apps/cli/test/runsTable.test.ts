import type { UsageTotals, WorkflowRecord } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { runRow, runTotals, totalsRows } from '../src/format/runsTable.ts';

const NOW = Date.parse('2026-12-06T12:00:00.000Z');

const usage = (
  input: number,
  output: number,
  costUsd: number,
  cachedTokens = 0,
  cacheWriteTokens = 0,
): UsageTotals => ({
  inputTokens: input,
  outputTokens: output,
  cachedTokens,
  ...(cacheWriteTokens > 0 ? { cacheWriteTokens } : {}),
  costUsd,
  modelCalls: 1,
});

const record = (taskId: string, extra: Partial<WorkflowRecord> = {}): WorkflowRecord => ({
  taskId,
  pipeline: 'demo',
  streamSequence: 1,
  status: 'completed',
  state: 'completed',
  goal: 'ship it',
  round: 1,
  usage: usage(0, 0, 0),
  createdAt: '2026-12-06T11:00:00.000Z',
  updatedAt: '2026-12-06T11:00:02.000Z',
  ...extra,
});

describe('troupe runs', () => {
  it('writes tokens and cost as troupe trace does: cache reads and writes apart, and $0.0000 for a free run', () => {
    const paid = runRow(record('t1', { usage: usage(100, 20, 0.002, 40) }), NOW);
    expect(paid.slice(6, 8)).toEqual(['100→20 (40 cache read)', '$0.0020']);
    const cached = runRow(record('t3', { usage: usage(1200, 80, 0.004, 900, 250) }), NOW);
    expect(cached.slice(6, 8)).toEqual(['1200→80 (900 cache read, 250 cache write)', '$0.0040']);
    const written = runRow(record('t4', { usage: usage(1200, 80, 0.005, 0, 1100) }), NOW);
    expect(written[6]).toBe('1200→80 (1100 cache write)');
    const free = runRow(record('t2', { usage: usage(1700, 215, 0) }), NOW);
    expect(free.slice(6, 8)).toEqual(['1700→215', '$0.0000']);
  });

  it('shows a running task a person holds as paused', () => {
    const since = '2026-12-06T11:30:00.000Z';
    expect(runRow(record('t3', { status: 'running', state: 'plan', paused: { since } }), NOW)[3]).toBe(
      'paused',
    );
    expect(runRow(record('t4', { status: 'running', state: 'plan' }), NOW)[3]).toBe('running');
  });

  it('totals tokens and cost per pipeline, and per day newest first, with a line for all', () => {
    const records = [
      record('a', { pipeline: 'release', usage: usage(100, 10, 0.01, 0, 60) }),
      record('b', { pipeline: 'demo', usage: usage(50, 5, 0), createdAt: '2026-12-05T23:59:59.000Z' }),
      record('c', {
        pipeline: 'release',
        usage: usage(200, 20, 0.02, 30),
        createdAt: '2026-12-04T08:00:00.000Z',
      }),
    ];
    const byPipeline = runTotals(records, 'pipeline');
    expect(byPipeline.map((t) => [t.pipeline, t.tasks, t.usage.inputTokens, t.usage.costUsd])).toEqual([
      ['demo', 1, 50, 0],
      ['release', 2, 300, 0.03],
    ]);
    expect(totalsRows(byPipeline, 'pipeline')).toEqual([
      ['PIPELINE', 'TASKS', 'CALLS', 'TOKENS', 'COST'],
      ['demo', '1', '1', '50→5', '$0.0000'],
      ['release', '2', '2', '300→30 (30 cache read, 60 cache write)', '$0.0300'],
      ['total', '3', '3', '350→35 (30 cache read, 60 cache write)', '$0.0300'],
    ]);
    const byDay = runTotals(records, 'day');
    expect(byDay.map((t) => [t.day, t.tasks])).toEqual([
      ['2026-12-06', 1],
      ['2026-12-05', 1],
      ['2026-12-04', 1],
    ]);
    // One group is its own total.
    expect(totalsRows(runTotals([records[0] as WorkflowRecord], 'day'), 'day')).toHaveLength(2);
  });
});
