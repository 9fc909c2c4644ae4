import type { WorkflowRecord } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { statusLine } from '../src/commands/control.ts';

const NOW = Date.parse('2026-12-06T12:00:00.000Z');

const record = (usage: WorkflowRecord['usage']): WorkflowRecord => ({
  taskId: 't1',
  pipeline: 'demo',
  streamSequence: 1,
  status: 'completed',
  state: 'completed',
  goal: 'ship it',
  round: 1,
  usage,
  createdAt: '2026-12-06T11:00:00.000Z',
  updatedAt: '2026-12-06T11:00:02.000Z',
});

describe('troupe status', () => {
  it("writes a task's prompt cache reads and writes apart after its tokens, as troupe runs does", () => {
    const line = statusLine(
      record({
        inputTokens: 1200,
        outputTokens: 80,
        cachedTokens: 900,
        cacheWriteTokens: 250,
        costUsd: 0.004,
        modelCalls: 2,
      }),
      NOW,
    );
    expect(line).toContain('1200→80 tok (900 cache read, 250 cache write) $0.0040');
  });

  it('writes no cache figures for a task that used no cache', () => {
    const line = statusLine(
      record({ inputTokens: 100, outputTokens: 20, cachedTokens: 0, costUsd: 0, modelCalls: 1 }),
      NOW,
    );
    expect(line).toContain('100→20 tok ');
    expect(line).not.toContain('cache');
  });
});
