import type { WorkflowRecord } from '@troupe/coordinator';
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

  it('says how a turn that did not complete ended', () => {
    const context = sessionContext('s', [{ taskId: 's-1', goal: 'g', record: failed }]);
    expect(context.earlier[0]).toMatchObject({
      status: 'failed',
      result: 'failed (budget_exceeded): out of tokens',
    });
  });
});
