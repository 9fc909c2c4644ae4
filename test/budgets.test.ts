import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixturePath, type Harness, ofKind, publishTask, startHarness } from './support/harness.ts';

describe('budgets, checked before each model call', () => {
  let h: Harness;

  beforeAll(async () => {
    h = await startHarness([
      fixturePath('budgeted.yaml'),
      fixturePath('stingy.yaml'),
      fixturePath('hasty.yaml'),
    ]);
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('ends the task with budget_exceeded when the task token budget is spent, naming it', async () => {
    publishTask(h, 'budgeted', { id: 'tokens-1', goal: 'loop' });
    const final = await h.finalOf('tokens-1');
    expect(final.kind).toBe('task.failed');
    if (final.kind !== 'task.failed') return;
    expect(final.data.reason).toBe('budget_exceeded');
    expect(final.data.message).toContain('the task budget of 250 tokens');
    // Two calls (300 tokens) passed the 250 budget: the third was never made.
    expect(ofKind(h.eventsOf('tokens-1'), 'llm.request')).toHaveLength(2);
    expect(final.data.usage.inputTokens + final.data.usage.outputTokens).toBe(300);
  });

  it('stops an agent at its own budget of model calls', async () => {
    publishTask(h, 'stingy', { id: 'calls-1', goal: 'plan' });
    const final = await h.finalOf('calls-1');
    expect(final.kind === 'task.failed' && final.data.reason).toBe('budget_exceeded');
    expect(final.kind === 'task.failed' && final.data.message).toContain(
      "agent planner's budget of 1 model calls",
    );
    expect(ofKind(h.eventsOf('calls-1'), 'llm.request')).toHaveLength(1);
  });

  it('stops a model call in flight when the task wall-clock budget runs out', async () => {
    publishTask(h, 'hasty', { id: 'clock-1', goal: 'think fast' });
    const final = await h.finalOf('clock-1');
    expect(final.kind === 'task.failed' && final.data.reason).toBe('budget_exceeded');
    expect(final.kind === 'task.failed' && final.data.message).toContain('wall-clock budget of 1 s');
    expect(ofKind(h.eventsOf('clock-1'), 'llm.response')).toHaveLength(0);
  });
});
