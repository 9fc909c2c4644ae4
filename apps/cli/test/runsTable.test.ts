import type { UsageTotals, WorkflowRecord } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { runRow } from '../src/format/runsTable.ts';

const NOW = Date.parse('2026-12-06T12:00:00.000Z');

const usage = (input: number, output: number, costUsd: number, cachedTokens = 0): UsageTotals => ({
  inputTokens: input,
  outputTokens: output,
  cachedTokens,
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
  it('writes tokens and cost as troupe trace does: cached tokens, and $0.0000 for a free run', () => {
    const paid = runRow(record('t1', { usage: usage(100, 20, 0.002, 40) }), NOW);
    expect(paid.slice(6, 8)).toEqual(['100→20 (40 cached)', '$0.0020']);
    const free = runRow(record('t2', { usage: usage(1700, 215, 0) }), NOW);
    expect(free.slice(6, 8)).toEqual(['1700→215', '$0.0000']);
  });
});
