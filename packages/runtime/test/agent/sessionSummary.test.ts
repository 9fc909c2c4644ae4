import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ModelError, type ModelProvider, type ModelRequest } from '@troupe/llm';
import { SessionSummaryReply, type SessionSummaryRequest, subjects } from '@troupe/protocol';
import { MemoryBus, SimulatedClock } from '@troupe/testkit';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type AgentHost, startAgentHost } from '../../src/agent/agentHost.ts';
import { createLogger } from '../../src/logging/logger.ts';
import { ToolRegistry } from '../../src/tools/toolRegistry.ts';

/** A model that answers each call with the next of `answers`: a text, or an error to throw. */
function modelAnswering(answers: (string | Error)[]) {
  const asked: ModelRequest[] = [];
  const model: ModelProvider = {
    provider: 'fake',
    model: 'fake-1',
    complete: async (request) => {
      asked.push(request);
      const answer = answers.shift() ?? new Error('no answer left');
      if (answer instanceof Error) throw answer;
      return {
        content: answer,
        toolCalls: [],
        usage: { inputTokens: 40, outputTokens: 8, cachedTokens: 0 },
        finishReason: 'stop',
        model: 'fake-1',
      };
    },
  };
  return { model, asked, answers };
}

const request: SessionSummaryRequest = {
  pipeline: 'notes',
  agent: 'historian',
  session: 'sess-1',
  taskId: 'sess-1-5-abcdef',
  previous: 'Turns 1–2: a README was written.',
  covered: 2,
  turns: [
    {
      taskId: 'sess-1-3-aaaaaa',
      goal: 'add tests',
      status: 'completed',
      result: 'tests/readme.test.ts added',
    },
    { taskId: 'sess-1-4-bbbbbb', goal: 'ship it', status: 'failed', result: 'failed (timeout): too slow' },
  ],
};

describe('session summaries served by the summarizer agent', () => {
  let root: string;
  let bus: MemoryBus;
  let host: AgentHost;
  let fake: ReturnType<typeof modelAnswering>;

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'troupe-summary-'));
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });
  beforeEach(() => {
    const clock = new SimulatedClock();
    bus = new MemoryBus({ clock });
    fake = modelAnswering([]);
    const agent = (name: string) => ({
      name,
      instructions: 'Keep the record.',
      model: fake.model,
      tools: [],
      rules: [],
      maxTurns: 2,
    });
    host = startAgentHost({
      bus,
      pipeline: 'notes',
      agents: [agent('writer'), agent('historian')],
      registry: new ToolRegistry(),
      workspaceRoot: root,
      logger: createLogger({ level: 'silent' }),
      clock,
      price: (_provider, _model, response) => response.usage.outputTokens * 0.001,
      sessionSummarizer: 'historian',
    });
    return () => host.stop();
  });

  const ask = (body: unknown = request, agent = 'historian') =>
    bus.request(subjects.sessionSummary('notes', agent), body, SessionSummaryReply, { timeoutMs: 5_000 });

  it('folds the turns into the summary so far with the agent’s model, and reports the call on the follow-up', async () => {
    fake.answers.push('Turns 1–4: README and tests written; shipping timed out.');
    const reply = await ask();
    expect(reply).toMatchObject({
      ok: true,
      summary: { summary: 'Turns 1–4: README and tests written; shipping timed out.', provider: 'fake' },
    });
    const [call] = fake.asked;
    expect(call?.context).toMatchObject({
      taskId: 'sess-1-5-abcdef',
      agent: 'historian',
      purpose: 'summary',
    });
    const text = call?.messages.map((m) => m.content).join('\n') ?? '';
    expect(text).toContain('# Summary so far (turns 1–2)\nTurns 1–2: a README was written.');
    expect(text).toContain('# Turn 3 (task sess-1-3-aaaaaa, completed)\nGoal: add tests');
    expect(text).toContain('# Turn 4 (task sess-1-4-bbbbbb, failed)');
    const [event] = bus.eventsOf('session.compacted');
    expect(event).toMatchObject({ taskId: 'sess-1-5-abcdef', pipeline: 'notes', from: 'historian' });
    expect(event?.data).toMatchObject({
      session: 'sess-1',
      turns: 4,
      folded: 2,
      costUsd: 0.008,
      model: 'fake-1',
    });
  });

  it('answers a model failure with its code, an empty summary as invalid, and a misrouted request as such', async () => {
    fake.answers.push(new ModelError('rate_limited', 'slow down'), '   ');
    const refused = (code: string) => ({ ok: false, error: { code } });
    expect(await ask()).toMatchObject(refused('rate_limited'));
    expect(await ask()).toMatchObject(refused('invalid_response'));
    expect(await ask({ ...request, agent: 'writer' })).toMatchObject(refused('misrouted'));
    expect(bus.eventsOf('session.compacted')).toEqual([]);
  });

  it('is served by the summarizer only, and refuses a malformed request without asking the model', async () => {
    await expect(ask({ ...request, agent: 'writer' }, 'writer')).rejects.toMatchObject({
      code: 'no_responders',
    });
    expect(await ask({ ...request, turns: [] })).toMatchObject({
      ok: false,
      error: { code: 'invalid_message' },
    });
    expect(fake.asked).toEqual([]);
  });
});
