import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isRemoteAgent } from '@troupe/runtime';
import { describe, expect, it } from 'vitest';
import { agentDefinitions, hostedAgents } from '../src/config/agentDefinitions.ts';
import { builtinTools } from '../src/config/builtinTools.ts';
import { ConfigError } from '../src/config/configError.ts';
import { loadPipeline, parsePipeline } from '../src/config/loadPipeline.ts';
import { sessionSummarizer } from '../src/config/pipelineSchema.ts';

const toolNames = builtinTools().names();
const CARD = 'https://agents.example.com/.well-known/agent-card.json';

/** A pipeline with a local agent and a remote one, `remote:` holding the remote agent's keys; `flow` its steps. */
function pipeline(remote: string, flow = '  - { id: research, kind: agent, agent: researcher }'): string {
  return `version: 1
name: remote
models: { scripted: { provider: scripted, script: ./s.yaml } }
defaults: { model: scripted }
agents:
  writer:
    instructions: Write it up.
  researcher:
${remote
  .split('\n')
  .map((line) => `    ${line}`)
  .join('\n')}
flow:
${flow}
`;
}

function issuesOf(text: string): readonly { path: string; message: string }[] {
  try {
    parsePipeline(text, 'remote.yaml', { toolNames });
  } catch (error) {
    if (error instanceof ConfigError) return error.issues;
    throw error;
  }
  return expect.fail('the pipeline was accepted');
}

const accepted = (text: string) => parsePipeline(text, 'remote.yaml', { toolNames });

describe('a remote (a2a) agent in a pipeline file', () => {
  it('is accepted with a card, and its defaults filled in', () => {
    const config = accepted(pipeline(`a2a: { card: ${CARD}, auth: "\${RESEARCH_TOKEN}" }`));
    expect(config.agents.researcher?.a2a).toEqual({
      card: CARD,
      auth: `\${RESEARCH_TOKEN}`,
      timeout: 30,
      maxAttempts: 4,
      retryDelay: 0.5,
      pollInterval: 2,
    });
  });

  it('takes none of the keys of an agent run here, each named', () => {
    const issues = issuesOf(
      pipeline(`instructions: Research.\ntools: [read_file]\nmodel: scripted\na2a: { card: ${CARD} }`),
    );
    for (const key of ['instructions', 'tools', 'model']) {
      expect(issues).toContainEqual({
        path: `agents.researcher.${key}`,
        message: expect.stringContaining(`a remote agent (a2a) takes no ${key}`),
        line: expect.any(Number),
        column: expect.any(Number),
      });
    }
  });

  it('still requires instructions of an agent that is not remote, and says how to make one remote', () => {
    const issues = issuesOf(pipeline('description: no instructions'));
    expect(issues.find((i) => i.path === 'agents.researcher.instructions')?.message).toMatch(
      /an agent needs instructions \(or, for an agent in another system, a2a: \{ card: <url> \}\)/,
    );
  });

  it('wants the token by reference and the card as an http(s) URL', () => {
    const issues = issuesOf(pipeline('a2a: { card: "ftp://x/card.json", auth: "Bearer abc" }'));
    expect(issues.find((i) => i.path === 'agents.researcher.a2a.card')?.message).toContain(
      'must be an http(s) URL of the agent card',
    );
    expect(issues.find((i) => i.path === 'agents.researcher.a2a.auth')?.message).toContain(
      `must name an environment variable as \${VAR}`,
    );
  });

  it('may work in agent, review, parallel and foreach steps', () => {
    const flow = `  - { id: draft, kind: agent, agent: writer }
  - { id: check, kind: review, agent: researcher, onReject: draft, maxRounds: 2 }
  - id: both
    kind: parallel
    branches:
      a: [{ id: a1, kind: agent, agent: researcher }]
      b: [{ id: b1, kind: agent, agent: writer }]
  - id: each
    kind: foreach
    items: "['x', 'y']"
    maxItems: 5
    do: [{ id: item, kind: agent, agent: researcher }]`;
    expect(() => accepted(pipeline(`a2a: { card: ${CARD} }`, flow))).not.toThrow();
  });

  it('cannot be a router, nor summarize sessions', () => {
    const flow = `  - id: pick
    kind: route
    agent: researcher
    targets: { a: first, b: second }
  - { id: a, kind: agent, agent: writer }
  - { id: b, kind: agent, agent: writer }`;
    const routed = issuesOf(pipeline(`a2a: { card: ${CARD} }`, flow));
    expect(routed.find((i) => i.path === 'flow[0].agent')?.message).toContain(
      'agent researcher is remote (a2a) and cannot be a router',
    );
    const summarizing = issuesOf(
      `${pipeline(`a2a: { card: ${CARD} }`)}sessions: { summarizer: researcher }\n`,
    );
    expect(summarizing.find((i) => i.path === 'sessions.summarizer')?.message).toContain(
      'agent researcher is remote (a2a): it has no model here to summarize with',
    );
    // Left unnamed, the summarizer is the first local agent, though the first step's is remote.
    expect(sessionSummarizer(accepted(pipeline(`a2a: { card: ${CARD} }`)))).toBe('writer');
  });
});

describe('loading a pipeline with a remote agent', () => {
  const withFile = async <T>(text: string, use: (file: string) => Promise<T>): Promise<T> => {
    const dir = await mkdtemp(join(tmpdir(), 'troupe-remote-config-'));
    try {
      await writeFile(join(dir, 's.yaml'), 'agents:\n  writer:\n    - content: done\n');
      await writeFile(join(dir, 'remote.yaml'), text);
      return await use(join(dir, 'remote.yaml'));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  };
  const text = pipeline(`a2a: { card: ${CARD}, auth: "\${RESEARCH_TOKEN}", timeout: 5 }`);

  it('reads the token from the environment, and hosts the agent as remote', async () => {
    await withFile(text, async (file) => {
      const loaded = await loadPipeline(file, { toolNames, env: { RESEARCH_TOKEN: 'tok-1' } });
      expect(loaded.remoteAgents.get('researcher')).toMatchObject({
        card: CARD,
        token: 'tok-1',
        requestTimeoutMs: 5_000,
      });
      expect(agentDefinitions(loaded).map((a) => a.name)).toEqual(['writer']);
      const hosted = hostedAgents(loaded);
      expect(hosted.map((a) => [a.name, isRemoteAgent(a)])).toEqual([
        ['writer', false],
        ['researcher', true],
      ]);
    });
  });

  it('refuses a token variable that is not set, or empty, at the agent, unless keys are not required', async () => {
    await withFile(text, async (file) => {
      for (const env of [{}, { RESEARCH_TOKEN: '' }]) {
        const error = await loadPipeline(file, { toolNames, env }).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(ConfigError);
        expect((error as ConfigError).issues).toContainEqual(
          expect.objectContaining({
            path: 'agents.researcher.a2a.auth',
            message: `agent researcher sends the token in \${RESEARCH_TOKEN}, which is not set (or empty) in this environment`,
          }),
        );
      }
      const unchecked = await loadPipeline(file, {
        toolNames,
        env: { RESEARCH_TOKEN: '' },
        requireKeys: false,
      });
      // No token is sent rather than an empty one.
      expect(unchecked.remoteAgents.get('researcher')?.token).toBeUndefined();
    });
  });
});
