import { type ModelProvider, type ModelRequest, Script, ScriptedProvider } from '@troupe/llm';
import { afterEach, describe, expect, it } from 'vitest';
import type { AgentDefinition } from '../../src/agent/agentDefinition.ts';
import { runAgentStep, type StepDeps } from '../../src/agent/agentStep.ts';
import { promptCacheHint } from '../../src/agent/promptCacheHint.ts';
import { coder, codeStep, removeWorkspaces, stepDeps, writesHello } from './stepSetup.ts';

afterEach(removeWorkspaces);

const MINUTE = 60_000;

const agent = (overrides: Partial<AgentDefinition> = {}): AgentDefinition =>
  coder(new ScriptedProvider(Script.parse({ agents: {} })), overrides);

const askRule: AgentDefinition['rules'] = [{ tool: 'write_file', decision: 'ask' }];

describe('promptCacheHint', () => {
  it('asks for an hour when the agent can ask a person (ask_human) and may wait on them 5 minutes', () => {
    const withAskHuman = agent({ tools: ['write_file', 'ask_human'] });
    expect(promptCacheHint(withAskHuman, { timeoutMs: 10 * MINUTE }, true)).toEqual({ ttl: '1h' });
    expect(promptCacheHint(withAskHuman, {}, true)).toEqual({ ttl: '1h' });
  });

  it('asks for an hour when a permission rule says ask (an approval)', () => {
    expect(
      promptCacheHint(agent({ rules: askRule, approvalTimeoutMs: 5 * MINUTE }), { timeoutMs: 600_000 }, true),
    ).toEqual({ ttl: '1h' });
  });

  it('asks nothing of an agent that never waits on a person, whatever its step timeout', () => {
    const rules: AgentDefinition['rules'] = [
      { tool: 'write_file', decision: 'allow', paths: ['src/**'] },
      { tool: 'write_file', decision: 'deny', paths: ['.git/**'] },
    ];
    expect(promptCacheHint(agent({ rules }), { timeoutMs: 3_600_000 }, true)).toBeUndefined();
    expect(promptCacheHint(agent(), {}, true)).toBeUndefined();
  });

  it('asks nothing where nobody can be asked: ask calls are denied and ask_human fails at once', () => {
    expect(promptCacheHint(agent({ tools: ['ask_human'], rules: askRule }), {}, false)).toBeUndefined();
  });

  it('asks nothing when the step or the person has less than 5 minutes: the default lifetime outlasts the wait', () => {
    const asking = agent({ rules: askRule });
    expect(promptCacheHint(asking, { timeoutMs: 4 * MINUTE }, true)).toBeUndefined();
    expect(
      promptCacheHint({ ...asking, approvalTimeoutMs: 2 * MINUTE }, { timeoutMs: 30 * MINUTE }, true),
    ).toBeUndefined();
  });
});

describe('runAgentStep: the prompt-cache lifetime its model calls ask for', () => {
  const request = codeStep({ timeoutMs: 600_000 });

  /** A scripted coder that writes a file, then answers; every request it was sent is kept. */
  function recording(): { model: ModelProvider; requests: ModelRequest[] } {
    const inner = writesHello();
    const requests: ModelRequest[] = [];
    return {
      requests,
      model: {
        provider: inner.provider,
        model: inner.model,
        complete: (req) => {
          requests.push(req);
          return inner.complete(req);
        },
      },
    };
  }

  const deps = async (human?: StepDeps['human']): Promise<StepDeps> =>
    (await stepDeps(human ? { human } : {})).deps;

  const approving: StepDeps['human'] = {
    approve: async () => ({ decision: 'allow' }),
    ask: async () => 'yes',
  };

  it('is one hour on every turn of a step that waits on a person’s approval', async () => {
    const { model, requests } = recording();
    const reply = await runAgentStep(agent({ model, rules: askRule }), request, await deps(approving));
    expect(reply.ok).toBe(true);
    expect(requests.map((r) => r.cache)).toEqual([{ ttl: '1h' }, { ttl: '1h' }]);
  });

  it('is left to the provider for a step that asks nobody', async () => {
    const { model, requests } = recording();
    const reply = await runAgentStep(agent({ model }), request, await deps(approving));
    expect(reply.ok).toBe(true);
    expect(requests).toHaveLength(2);
    for (const sent of requests) expect(sent).not.toHaveProperty('cache');
  });
});
