import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixturePath, type Harness, ofKind, publishTask, startHarness } from './support/harness.ts';

describe('conversation compaction', () => {
  let h: Harness;

  beforeAll(async () => {
    h = await startHarness([fixturePath('chatty.yaml')]);
  });
  afterAll(async () => {
    await h?.stop();
  });

  it('summarizes older turns once the conversation outgrows its budget, and the loop continues', async () => {
    publishTask(h, 'chatty', { id: 'chatty-1', goal: 'look around' });
    const final = await h.finalOf('chatty-1');
    expect(final.kind === 'task.completed' && final.data.output).toBe('done');
    const [compaction, ...more] = ofKind(h.eventsOf('chatty-1'), 'context.compacted');
    expect(more).toHaveLength(0);
    // system + task + 4 × (call, result) = 10 messages; the two oldest turns became one summary.
    expect(compaction?.data).toMatchObject({
      index: 1,
      before: 10,
      after: 9,
      summary: 'Listed the workspace four times; it is empty.',
      provider: 'scripted',
      usage: { outputTokens: expect.any(Number) },
    });
    expect(compaction?.data.journaled).toBeUndefined();
    const requests = ofKind(h.eventsOf('chatty-1'), 'llm.request');
    expect(requests.map((r) => r.data.messages)).toEqual([2, 4, 6, 8, 9]);
    // The summary call's tokens count toward the step.
    const step = ofKind(h.eventsOf('chatty-1'), 'step.completed')[0];
    const responses = ofKind(h.eventsOf('chatty-1'), 'llm.response');
    const fromResponses = responses.reduce((n, r) => n + r.data.usage.outputTokens, 0);
    expect(step?.data.usage.outputTokens).toBe(fromResponses + (compaction?.data.usage?.outputTokens ?? 0));
    expect(step?.data.usage.outputTokens).toBeGreaterThan(fromResponses);
  });
});
