import type { SessionSummary, WorkflowRecord } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { CONTEXT_LIMITS, sessionContext } from '../src/sessions.ts';

const completed = (output: string) =>
  ({ status: 'completed', final: { kind: 'task.completed', data: { output } } }) as unknown as WorkflowRecord;
const failed = {
  status: 'failed',
  final: { kind: 'task.failed', data: { reason: 'budget_exceeded', message: 'out of tokens' } },
} as unknown as WorkflowRecord;

describe('sessionContext', () => {
  it('gives the last turns whole and condenses older ones', () => {
    const long = 'x'.repeat(2_000);
    const turns = Array.from({ length: 5 }, (_, i) => ({
      taskId: `s-${i + 1}`,
      goal: `goal ${i + 1}`,
      record: completed(long),
    }));
    const context = sessionContext('s', turns);
    expect(context.earlier.map((t) => t.taskId)).toEqual(['s-1', 's-2', 's-3', 's-4', 's-5']);
    expect(context.earlier.slice(0, 2).map((t) => t.result.length)).toEqual([
      CONTEXT_LIMITS.condensedChars + '…[1700 more characters]'.length,
      CONTEXT_LIMITS.condensedChars + '…[1700 more characters]'.length,
    ]);
    expect(context.earlier.slice(2).every((t) => t.result === long)).toBe(true);
    expect(context.omitted).toBeUndefined();
  });

  it('leaves the oldest turns out past the budget, saying how many, but never the last', () => {
    const huge = 'y'.repeat(50_000);
    const turns = Array.from({ length: 40 }, (_, i) => ({
      taskId: `s-${i + 1}`,
      goal: `goal ${i + 1}`,
      record: completed(huge),
    }));
    const context = sessionContext('s', turns);
    const size = context.earlier.reduce((n, t) => n + t.goal.length + t.result.length, 0);
    expect(size).toBeLessThanOrEqual(CONTEXT_LIMITS.budgetChars);
    expect(context.earlier.at(-1)?.taskId).toBe('s-40');
    expect((context.omitted ?? 0) + context.earlier.length).toBe(40);
    expect(context.omitted).toBeGreaterThan(0);
  });

  it('gives the summary in place of the turns it covers, and the turns after it', () => {
    const turns = Array.from({ length: 6 }, (_, i) => ({
      taskId: `s-${i + 1}`,
      goal: `goal ${i + 1}`,
      record: completed('x'.repeat(2_000)),
    }));
    const summary: SessionSummary = {
      text: 'turns 1 and 2, in short',
      turns: 2,
      agent: 'historian',
      provider: 'openai',
      model: 'small',
      usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0 },
      costUsd: 0,
      at: '2026-01-01T00:00:00Z',
    };
    const context = sessionContext('s', turns, summary);
    expect(context.summary).toEqual({ text: 'turns 1 and 2, in short', turns: 2 });
    expect(context.earlier.map((t) => t.taskId)).toEqual(['s-3', 's-4', 's-5', 's-6']);
    // Turn 3 left the last three but is not in the summary yet (its summarizer did not answer): it goes condensed.
    expect(context.earlier[0]?.result).toHaveLength(
      CONTEXT_LIMITS.condensedChars + '…[1700 more characters]'.length,
    );
    expect(context.earlier.slice(1).every((t) => t.result.length === 2_000)).toBe(true);
  });

  it('says how a turn that did not complete ended', () => {
    const context = sessionContext('s', [{ taskId: 's-1', goal: 'g', record: failed }]);
    expect(context.earlier[0]).toMatchObject({
      status: 'failed',
      result: 'failed (budget_exceeded): out of tokens',
    });
  });
});

describe('the dashboard', () => {
  it('listens for every kind of event the protocol has', async () => {
    const { EVENT_KINDS } = await import('@troupe/protocol');
    // Built for the browser, with the DOM's types: loaded by path, so this project's compiler does not check it.
    const client = '../dashboard/src/client.ts';
    const dashboard = (await import(client)) as { EVENT_KINDS: readonly string[] };
    expect([...dashboard.EVENT_KINDS].sort()).toEqual([...EVENT_KINDS].sort());
  });
});
