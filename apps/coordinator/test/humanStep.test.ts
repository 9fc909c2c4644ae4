import type { HumanGate, StepJournal } from '@troupe/runtime';
import { SimulatedClock } from '@troupe/testkit';
import { describe, expect, it } from 'vitest';
import { createHumanStepRunner } from '../src/workflow/humanStep.ts';
import type { HumanRunInput } from '../src/workflow/workflowTypes.ts';

/** A gate that answers each question with the next of `answers`, after `takesMs` on the clock. */
function gate(answers: string[], clock: SimulatedClock, takesMs = 0) {
  const asked: { question: string; timeoutMs: number | undefined }[] = [];
  const people: HumanGate = {
    approve: async () => ({ decision: 'deny', reason: 'not asked' }),
    ask: async (question, scope, _signal, options) => {
      asked.push({ question, timeoutMs: scope.timeoutMs });
      await options?.onAsked?.(`q${asked.length}`);
      clock.advance(takesMs);
      return answers.shift() ?? '';
    },
  };
  return { people, asked };
}

const journal = () => {
  const ids = new Map<string, string>();
  return {
    humanRequest: async (key: string) => ids.get(key),
    recordHumanRequest: async (key: string, id: string) => void ids.set(key, id),
  } as unknown as StepJournal;
};

const input = (answer?: Record<string, unknown>): HumanRunInput => ({
  taskId: 't1',
  pipeline: 'demo',
  step: 'confirm',
  stepId: 't1.confirm.1',
  prompt: 'Version?',
  timeoutMs: 60_000,
  ...(answer ? { answer } : {}),
  traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
});

describe('a human step', () => {
  it('takes text that reads as JSON as text when the schema wants a string', async () => {
    const clock = new SimulatedClock();
    const { people } = gate(['123'], clock);
    const run = createHumanStepRunner({ gate: people, journal: journal(), clock, onActivity: () => {} });
    expect(await run(input({ type: 'string' }), new AbortController().signal)).toMatchObject({
      ok: true,
      answer: '123',
    });
  });

  it('asks again with what is left of its time, and fails after three answers that miss the schema', async () => {
    const clock = new SimulatedClock();
    const { people, asked } = gate(['maybe', 'perhaps', 'dunno'], clock, 10_000);
    const run = createHumanStepRunner({ gate: people, journal: journal(), clock, onActivity: () => {} });
    const out = await run(input({ type: 'boolean' }), new AbortController().signal);
    expect(out).toMatchObject({ ok: false, code: 'invalid_answer' });
    expect(asked.map((a) => a.timeoutMs)).toEqual([60_000, 50_000, 40_000]);
    expect(asked[1]?.question).toContain('Your last answer could not be used');
  });
});
