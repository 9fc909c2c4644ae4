import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ModelProvider } from '@troupe/llm';
import { AgentStepReply, type AgentStepRequest, subjects } from '@troupe/protocol';
import { MemoryBus, SimulatedClock } from '@troupe/testkit';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { AgentDefinition } from '../../src/agent/agentDefinition.ts';
import { type AgentHost, startAgentHost } from '../../src/agent/agentHost.ts';
import { createLogger } from '../../src/logging/logger.ts';
import { ToolRegistry } from '../../src/tools/toolRegistry.ts';

/** A model that always says `content`. */
const saying = (content: string): ModelProvider => ({
  provider: 'fixed',
  model: content,
  complete: async () => ({
    content,
    toolCalls: [],
    usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0 },
    finishReason: 'stop',
    model: content,
  }),
});

const agent = (name: string, content: string): AgentDefinition => ({
  name,
  instructions: `Be ${name}.`,
  model: saying(content),
  tools: [],
  rules: [],
  maxTurns: 2,
});

const OWN = 'a'.repeat(64);
const OLD = 'b'.repeat(64);
const GONE = 'c'.repeat(64);
/** A version stored, whose agents cannot run on this host (a key it lacks). */
const KEYLESS = 'e'.repeat(64);

/**
 * An agent host of one pipeline version serving steps of tasks on other versions: each step runs the agent its own
 * version defines, the host's for its own version or none, else the one `agentOf` loads.
 */
describe('an agent host serving steps of several pipeline versions', () => {
  let root: string;
  let bus: MemoryBus;
  let host: AgentHost;
  const loads: string[] = [];

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'troupe-host-versions-'));
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });
  beforeEach(() => {
    const clock = new SimulatedClock();
    bus = new MemoryBus({ clock });
    loads.length = 0;
    host = startAgentHost({
      bus,
      pipeline: 'versioned',
      agents: [agent('writer', 'as written now')],
      registry: new ToolRegistry(),
      workspaceRoot: root,
      logger: createLogger({ level: 'silent' }),
      clock,
      version: OWN,
      agentOf: async (version, name) => {
        loads.push(`${version.slice(0, 1)}:${name}`);
        if (version === KEYLESS) return 'agent writer needs OPENAI_API_KEY, which is not set here';
        if (version !== OLD) return undefined;
        return { writer: agent('writer', 'as written then'), drafter: agent('drafter', 'drafted then') }[
          name as 'writer'
        ];
      },
      olderAgents: ['drafter'],
    });
    return () => host.stop();
  });

  async function step(agentName: string, version?: string): Promise<AgentStepReply> {
    const request: AgentStepRequest = {
      stepId: `t-${agentName}-${version?.slice(0, 1) ?? 'none'}.work.1`,
      taskId: 't-1',
      pipeline: 'versioned',
      agent: agentName,
      step: 'work',
      round: 1,
      goal: 'write',
      context: [],
      expect: 'text',
      ...(version === undefined ? {} : { version }),
    };
    const replies: AgentStepReply[] = [];
    bus.requestReplies(subjects.agent('versioned', agentName), request, (message) => {
      if (!message.ok) return;
      const parsed = AgentStepReply.safeParse(JSON.parse(new TextDecoder().decode(message.data)));
      if (parsed.success) replies.push(parsed.data);
    });
    await expect.poll(() => replies.length).toBe(1);
    return replies[0] as AgentStepReply;
  }

  it('runs its own agent for a step of its own version or of none, loading nothing', async () => {
    expect(await step('writer')).toMatchObject({ ok: true, output: 'as written now' });
    expect(await step('writer', OWN)).toMatchObject({ ok: true, output: 'as written now' });
    expect(loads).toEqual([]);
  });

  it('runs the agent as an older version defines it, for a step of that version', async () => {
    expect(await step('writer', OLD)).toMatchObject({ ok: true, output: 'as written then' });
    expect(loads).toEqual(['b:writer']);
  });

  it('serves an agent only an older version has (renamed since), for that version’s steps', async () => {
    expect(await step('drafter', OLD)).toMatchObject({ ok: true, output: 'drafted then' });
    // Without a version, the host has no definition of it of its own.
    expect(await step('drafter')).toMatchObject({ ok: false, error: { code: 'version_unavailable' } });
  });

  it('fails a step of a version it cannot load as version_unavailable, naming the version', async () => {
    const reply = await step('writer', GONE);
    expect(reply).toMatchObject({ ok: false, error: { code: 'version_unavailable' } });
    expect(reply.ok ? '' : reply.error.message).toContain(
      `version ${GONE.slice(0, 12)} of pipeline versioned`,
    );
    // One that cannot run here says why; not retryable, so the workflow does not send it again.
    expect(await step('writer', KEYLESS)).toMatchObject({
      ok: false,
      error: {
        code: 'version_unavailable',
        message: 'agent writer needs OPENAI_API_KEY, which is not set here',
      },
    });
  });
});
