import { describe, expect, it } from 'vitest';
import { finalOutputSchema } from '../src/config/finalOutput.ts';
import { PipelineConfig } from '../src/config/pipelineSchema.ts';

const counted = { type: 'object', properties: { words: { type: 'integer' } }, required: ['words'] };

const pipeline = (flow: unknown[], output: unknown = counted) =>
  PipelineConfig.parse({
    version: 1,
    name: 'counted',
    models: { scripted: { provider: 'scripted', script: './s.yaml' } },
    defaults: { model: 'scripted' },
    agents: { drafter: { instructions: 'Draft.' }, counter: { instructions: 'Count.', output } },
    flow,
  });

describe('finalOutputSchema: the output schema a pipeline can promise every completed task matches', () => {
  it("is the last step's agent's output schema when the flow always ends there", () => {
    const flow = [
      { id: 'draft', kind: 'agent', agent: 'drafter' },
      { id: 'count', kind: 'agent', agent: 'counter' },
    ];
    expect(finalOutputSchema(pipeline(flow))).toEqual(counted);
  });

  it('is none when the last step may not run or may not be the end', () => {
    const last = { id: 'count', kind: 'agent', agent: 'counter' };
    const draft = { id: 'draft', kind: 'agent', agent: 'drafter' };
    // Skipped by a condition, passed over on failure, jumped around, or not an agent step at all.
    expect(finalOutputSchema(pipeline([draft, { ...last, when: 'true' }]))).toBeUndefined();
    expect(finalOutputSchema(pipeline([draft, { ...last, onError: 'continue' }]))).toBeUndefined();
    expect(finalOutputSchema(pipeline([{ ...draft, next: 'end' }, last]))).toBeUndefined();
    expect(
      finalOutputSchema(
        pipeline([{ id: 'pick', kind: 'route', on: 'input.kind', cases: { a: 'count', b: 'end' } }, last]),
      ),
    ).toBeUndefined();
    expect(finalOutputSchema(pipeline([last, { id: 'ask', kind: 'human', prompt: 'OK?' }]))).toBeUndefined();
  });

  it('is none when the agent declares none, or one whose top is not an object', () => {
    const flow = [{ id: 'count', kind: 'agent', agent: 'drafter' }];
    expect(finalOutputSchema(pipeline(flow))).toBeUndefined();
    expect(
      finalOutputSchema(pipeline([{ id: 'count', kind: 'agent', agent: 'counter' }], { type: 'array' })),
    ).toBeUndefined();
  });
});
