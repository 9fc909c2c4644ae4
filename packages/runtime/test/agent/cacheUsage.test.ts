import { type ModelProvider, PriceTable, type Usage } from '@troupe/llm';
import type { EventOf, TroupeEvent } from '@troupe/protocol';
import { MemoryKv } from '@troupe/testkit';
import { afterEach, describe, expect, it } from 'vitest';
import { runAgentStep, type StepDeps } from '../../src/agent/agentStep.ts';
import { JournalEntry, StepJournal } from '../../src/durable/stepJournal.ts';
import { coder, codeStep, removeWorkspaces, stepDeps, writesHello } from './stepSetup.ts';

afterEach(removeWorkspaces);

const request = codeStep({ traceparent: '00-0123456789abcdef0123456789abcdef-0123456789abcdef-01' });

/** Cache counts per call, as a caching provider reports them: the first call writes, the second reads. */
const counts: Partial<Usage>[] = [
  { inputTokens: 1_200, cachedTokens: 0, cacheWriteTokens: 1_000, cacheWrite1hTokens: 1_000 },
  { inputTokens: 1_300, cachedTokens: 1_000, cacheWriteTokens: 250 },
];

/** The scripted model, its replies' usage given the cache counts of `counts`, call by call. */
function cachingModel(): ModelProvider {
  const inner = writesHello('claude-sonnet-4-5');
  let call = 0;
  return {
    provider: 'anthropic',
    model: inner.model,
    complete: async (req) => {
      const response = await inner.complete(req);
      return { ...response, usage: { ...response.usage, outputTokens: 20, ...counts[call++] } };
    },
  };
}

/** A step's deps that price each call with the shipped price table. */
function deps(overrides: Partial<StepDeps> = {}): Promise<{ deps: StepDeps; events: TroupeEvent[] }> {
  const prices = new PriceTable();
  return stepDeps({
    price: (provider, model, response) => prices.cost(provider, model, response.usage),
    ...overrides,
  });
}

const responses = (events: TroupeEvent[]) =>
  events.filter((e): e is EventOf<'llm.response'> => e.kind === 'llm.response').map((e) => e.data);

describe('an agent step: prompt cache reads and writes', () => {
  it('says each call’s cache reads and writes in its llm.response, and sums them in the step’s usage', async () => {
    const { deps: d, events } = await deps();

    const reply = await runAgentStep(coder(cachingModel()), request, d);

    expect(responses(events).map((r) => r.usage)).toEqual([
      {
        inputTokens: 1_200,
        outputTokens: 20,
        cachedTokens: 0,
        cacheWriteTokens: 1_000,
        cacheWrite1hTokens: 1_000,
      },
      { inputTokens: 1_300, outputTokens: 20, cachedTokens: 1_000, cacheWriteTokens: 250 },
    ]);
    const [first, second] = responses(events);
    expect(first?.costUsd).toBeGreaterThan(0);
    expect(reply.usage).toEqual({
      inputTokens: 2_500,
      outputTokens: 40,
      cachedTokens: 1_000,
      cacheWriteTokens: 1_250,
      costUsd: (first?.costUsd ?? 0) + (second?.costUsd ?? 0),
      modelCalls: 2,
    });
  });

  it('keeps the counts of a reply replayed from the journal, and in what earlier runs spent', async () => {
    const journal = new StepJournal(new MemoryKv(JournalEntry));
    const { deps: d } = await deps({ journal });
    await runAgentStep(coder(cachingModel()), request, d);

    const { deps: again, events } = await deps({ journal });
    const reply = await runAgentStep(coder(cachingModel()), request, again);

    expect(responses(events).map((r) => [r.journaled, r.usage.cacheWriteTokens])).toEqual([
      [true, 1_000],
      [true, 250],
    ]);
    expect(reply.usage).toMatchObject({ cachedTokens: 1_000, cacheWriteTokens: 1_250 });
    expect(await journal.spent(request.stepId)).toMatchObject({
      cachedTokens: 1_000,
      cacheWriteTokens: 1_250,
      modelCalls: 2,
    });
  });
});
