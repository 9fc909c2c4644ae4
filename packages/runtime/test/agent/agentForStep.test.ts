import type { ModelProvider } from '@troupe/llm';
import { describe, expect, it } from 'vitest';
import type { AgentDefinition } from '../../src/agent/agentDefinition.ts';
import { type AgentVersions, agentForStep } from '../../src/agent/agentForStep.ts';
import { createLogger } from '../../src/logging/logger.ts';
import { stepRequest } from './hostFakes.ts';

const model: ModelProvider = {
  provider: 'none',
  model: 'none',
  complete: () => Promise.reject(new Error('no')),
};
const writer = (instructions: string): AgentDefinition => ({
  name: 'writer',
  instructions,
  model,
  tools: [],
  rules: [],
  maxTurns: 1,
});
const OWN = 'a'.repeat(64);
const OLD = 'b'.repeat(64);
const versions = (agentOf?: AgentVersions['agentOf']): AgentVersions => ({
  pipeline: 'demo',
  version: OWN,
  agentOf,
  logger: createLogger({ level: 'silent' }),
});

describe('the agent a step runs', () => {
  const own = writer('now');

  it('is the host’s own for a step of its version or of none', async () => {
    expect(await agentForStep(own, 'writer', stepRequest('t.w.1'), versions())).toBe(own);
    expect(await agentForStep(own, 'writer', stepRequest('t.w.1', { version: OWN }), versions())).toBe(own);
  });

  it('is the one another version defines, for a step of that version', async () => {
    const then = writer('then');
    const found = await agentForStep(
      own,
      'writer',
      stepRequest('t.w.1', { version: OLD }),
      versions(async () => then),
    );
    expect(found).toBe(then);
  });

  it('is a version_unavailable reply naming the version when none can run here', async () => {
    const request = stepRequest('t.w.1', { version: OLD });
    expect(await agentForStep(own, 'writer', request, versions())).toMatchObject({
      ok: false,
      error: {
        code: 'version_unavailable',
        message: `this host runs only its own version of pipeline demo, not ${OLD.slice(0, 12)}`,
      },
    });
    expect(await agentForStep(undefined, 'writer', stepRequest('t.w.1'), versions())).toMatchObject({
      error: {
        code: 'version_unavailable',
        message: 'agent writer of pipeline demo is served here only for older versions',
      },
    });
    expect(
      await agentForStep(
        own,
        'writer',
        request,
        versions(async () => 'needs OPENAI_API_KEY'),
      ),
    ).toMatchObject({
      error: { code: 'version_unavailable', message: 'needs OPENAI_API_KEY' },
    });
  });

  it('is a journal_unavailable reply, for the workflow to send again, when the version cannot be read now', async () => {
    const failing = versions(() => Promise.reject(new Error('registry timed out')));
    expect(await agentForStep(own, 'writer', stepRequest('t.w.1', { version: OLD }), failing)).toMatchObject({
      ok: false,
      error: {
        code: 'journal_unavailable',
        message: `cannot load agent writer of version ${OLD.slice(0, 12)} of pipeline demo: registry timed out`,
      },
    });
  });
});
