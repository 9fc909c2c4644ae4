import { access, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { type ModelProvider, type ModelRequest, Script, ScriptedProvider } from '@troupe/llm';
import type { AgentStepRequest, EventKind, EventOf, TroupeEvent } from '@troupe/protocol';
import { MemoryKv, SimulatedClock } from '@troupe/testkit';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { AgentDefinition } from '../../src/agent/agentDefinition.ts';
import { runAgentStep, type StepDeps, startAgentStep } from '../../src/agent/agentStep.ts';
import { AgentStepError } from '../../src/agent/agentStepError.ts';
import { taskWorkspace } from '../../src/agent/journaledTools.ts';
import { StepActors } from '../../src/agent/stepActors.ts';
import { StepTimedOutError } from '../../src/approvals/stepTimedOutError.ts';
import { JournalEntry, StepJournal } from '../../src/durable/stepJournal.ts';
import { systemClock } from '../../src/events/clock.ts';
import { EventFactory } from '../../src/events/eventFactory.ts';
import { fileTools, ToolRegistry } from '../../src/tools/index.ts';
import type { WorkspaceSync } from '../../src/workspace/workspaceSync.ts';

const roots: string[] = [];
afterEach(async () => {
  await Promise.all(roots.splice(0).map((dir) => rm(dir, { recursive: true, force: true })));
});

async function tempRoot(): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'troupe-agent-'));
  roots.push(dir);
  return dir;
}

const request: AgentStepRequest = {
  stepId: 'task-1.code.1',
  taskId: 'task-1',
  pipeline: 'demo',
  agent: 'coder',
  step: 'code',
  round: 1,
  goal: 'write notes/hello.md',
  context: [],
  expect: 'text',
  traceparent: '00-0123456789abcdef0123456789abcdef-0123456789abcdef-01',
};

/** A scripted model that also keeps every request it was sent. */
function recordingModel(script: unknown): { model: ModelProvider; requests: ModelRequest[] } {
  const inner = new ScriptedProvider(Script.parse(script));
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

function coder(model: ModelProvider, overrides: Partial<AgentDefinition> = {}): AgentDefinition {
  return {
    name: 'coder',
    instructions: 'You write files.',
    model,
    tools: ['write_file', 'read_file'],
    rules: [],
    maxTurns: 5,
    ...overrides,
  };
}

/**
 * Real registry, real event factory, events collected; a clock that moves 5 ms each time it is read. The step's
 * agent actor runs as a child of a host's actor on the same clock, as in an agent host, unless `alone`.
 */
async function setup(
  overrides: Partial<StepDeps> = {},
  { alone = false }: { alone?: boolean } = {},
): Promise<{ deps: StepDeps; events: TroupeEvent[]; root: string }> {
  const registry = new ToolRegistry();
  for (const tool of fileTools) registry.register(tool);
  const events: TroupeEvent[] = [];
  let ticks = 0;
  const root = await tempRoot();
  const deps: StepDeps = {
    registry,
    workspaceRoot: root,
    clock: { ...systemClock, now: () => (ticks += 5) },
    events: new EventFactory({ now: () => Date.UTC(2025, 0, 1) }),
    publish: (event) => events.push(event),
    ...overrides,
  };
  if (!alone) deps.actors = new StepActors(deps.clock);
  return { deps, events, root };
}

const ofKind = <K extends EventKind>(events: TroupeEvent[], kind: K): EventOf<K>[] =>
  events.filter((event): event is EventOf<K> => event.kind === kind);

const writeCall = (file: string, content: string) => ({
  id: 'call-w',
  name: 'write_file',
  arguments: { path: file, content },
});

describe('runAgentStep', () => {
  it('places the task workspace at <root>/<pipeline>/<taskId>', () => {
    expect(taskWorkspace('/srv/troupe', 'demo', 'task-1')).toBe(path.join('/srv/troupe', 'demo', 'task-1'));
  });

  it('runs write_file in the task workspace and replies with the final text', async () => {
    const { model, requests } = recordingModel({
      agents: {
        coder: [
          { toolCalls: [writeCall('notes/hello.md', '# Hi')], usage: { inputTokens: 40, outputTokens: 12 } },
          { content: 'Wrote notes/hello.md', usage: { inputTokens: 60, outputTokens: 4 } },
        ],
      },
    });
    const { deps, root } = await setup();

    const reply = await runAgentStep(coder(model), request, deps);

    expect(await readFile(path.join(root, 'demo', 'task-1', 'notes', 'hello.md'), 'utf8')).toBe('# Hi');
    expect(reply).toEqual({
      ok: true,
      stepId: 'task-1.code.1',
      output: 'Wrote notes/hello.md',
      usage: { inputTokens: 100, outputTokens: 16, cachedTokens: 0, costUsd: 0, modelCalls: 2 },
      turns: 2,
      // Not `fresh`: a run before this one may have asked a person.
      askedPeople: true,
    });

    // The model was shown the declared tools and, on its second turn, the tool's result.
    expect(requests[0]?.tools.map((t) => t.name)).toEqual(['write_file', 'read_file']);
    expect(requests[0]?.context).toEqual({
      taskId: 'task-1',
      pipeline: 'demo',
      agent: 'coder',
      stepId: 'task-1.code.1',
    });
    expect(requests[0]?.messages[0]).toEqual({ role: 'system', content: 'You write files.' });
    expect(requests[1]?.messages.at(-1)).toEqual({
      role: 'tool',
      toolCallId: 'call-w',
      name: 'write_file',
      content: 'wrote 4 bytes to notes/hello.md',
    });
  });

  it('runs alone too, its agent actor a root of its own, when no host gives it actors (a replay, a library caller)', async () => {
    const { model } = recordingModel({ agents: { coder: [{ content: 'done alone' }] } });
    const { deps, events } = await setup({}, { alone: true });
    expect(deps.actors).toBeUndefined();
    const reply = await runAgentStep(coder(model), request, deps);
    expect(reply).toMatchObject({ ok: true, output: 'done alone', turns: 1 });
    expect(events.map((e) => e.kind)).toEqual(['llm.request', 'llm.response']);
  });

  it('shows every step of an agent the same tool definitions, made once rather than copied into each step', async () => {
    const { model, requests } = recordingModel({
      agents: { coder: [{ content: 'one' }, { content: 'two' }] },
    });
    const { deps } = await setup();
    const agent = coder(model);
    await runAgentStep(agent, request, deps);
    await runAgentStep(agent, { ...request, stepId: 'task-2.code.1', taskId: 'task-2' }, deps);
    expect(requests[0]?.tools.map((t) => t.name)).toEqual(['write_file', 'read_file']);
    expect(requests[1]?.tools).toBe(requests[0]?.tools);
    // Another agent gets its own.
    const third = await runAgentStep(
      coder(model, { tools: ['read_file'] }),
      { ...request, stepId: 'task-3.code.1' },
      deps,
    );
    expect(third.ok).toBe(true);
    expect(requests[2]?.tools.map((t) => t.name)).toEqual(['read_file']);
  });

  it('publishes the step as events, the tool call and result sharing one call id', async () => {
    const { model } = recordingModel({
      agents: { coder: [{ toolCalls: [writeCall('hello.md', 'hi')] }, { content: 'done' }] },
    });
    const { deps, events } = await setup();
    await runAgentStep(coder(model), request, deps);

    expect(events.map((e) => e.kind)).toEqual([
      'llm.request',
      'llm.response',
      'tool.call',
      'tool.result',
      'llm.request',
      'llm.response',
    ]);
    for (const event of events) {
      expect(event).toMatchObject({ pipeline: 'demo', taskId: 'task-1', traceparent: request.traceparent });
      expect(event.data).toMatchObject({ agent: 'coder', stepId: 'task-1.code.1' });
    }
    expect(new Set(events.map((e) => e.id)).size).toBe(events.length);

    const [toolCall] = ofKind(events, 'tool.call');
    const [toolResult] = ofKind(events, 'tool.result');
    expect(toolCall?.data).toMatchObject({
      callId: 'call-w',
      tool: 'write_file',
      arguments: '{"path":"hello.md","content":"hi"}',
    });
    expect(toolResult?.data).toMatchObject({
      callId: toolCall?.data.callId,
      tool: 'write_file',
      ok: true,
      decision: 'allow',
      output: 'wrote 2 bytes to hello.md',
    });
    expect(toolResult?.data).not.toHaveProperty('error');

    const requests = ofKind(events, 'llm.request');
    expect(requests.map((e) => e.data.turn)).toEqual([1, 2]);
    expect(requests[0]?.data).toMatchObject({ provider: 'scripted', model: 'scripted', messages: 2 });
    const [firstResponse] = ofKind(events, 'llm.response');
    expect(firstResponse?.data).toMatchObject({
      turn: 1,
      finishReason: 'tool_calls',
      toolCalls: [{ id: 'call-w', name: 'write_file' }],
      durationMs: 5,
      costUsd: 0,
    });
  });

  it('prices each model call and sums the cost into the reply', async () => {
    const { model } = recordingModel({
      agents: { coder: [{ toolCalls: [writeCall('a.md', 'a')] }, { content: 'done' }] },
    });
    const priced: string[] = [];
    const { deps, events } = await setup({
      price: (provider, modelName, response) => {
        priced.push(`${provider}/${modelName}/${response.finishReason}`);
        return 0.25;
      },
    });
    const reply = await runAgentStep(coder(model), request, deps);
    expect(priced).toEqual(['scripted/scripted/tool_calls', 'scripted/scripted/stop']);
    expect(reply.usage.costUsd).toBe(0.5);
    expect(ofKind(events, 'llm.response').map((e) => e.data.costUsd)).toEqual([0.25, 0.25]);
  });

  it('hands a path outside the workspace back to the model as a tool error and carries on', async () => {
    const { model, requests } = recordingModel({
      agents: {
        coder: [{ toolCalls: [writeCall('../escape.txt', 'x')] }, { content: 'could not write it' }],
      },
    });
    const { deps, events, root } = await setup();
    const reply = await runAgentStep(coder(model), request, deps);

    expect(reply).toMatchObject({ ok: true, output: 'could not write it', turns: 2 });
    const [toolResult] = ofKind(events, 'tool.result');
    expect(toolResult?.data).toMatchObject({
      ok: false,
      callId: 'call-w',
      error: { code: 'path_outside_workspace' },
    });
    expect(toolResult?.data.error?.message).toContain('../escape.txt');
    await expect(access(path.join(root, 'demo', 'escape.txt'))).rejects.toThrow();
    const toolMessage = requests[1]?.messages.at(-1);
    expect(toolMessage).toMatchObject({ role: 'tool', toolCallId: 'call-w', isError: true });
    expect(toolMessage?.content).toBe(toolResult?.data.error?.message);
  });

  it('refuses a registered tool the agent did not declare, and a tool nobody registered', async () => {
    const { model, requests } = recordingModel({
      agents: {
        coder: [
          {
            toolCalls: [
              { id: 'call-1', name: 'write_file', arguments: { path: 'sneaky.md', content: 'x' } },
              { id: 'call-2', name: 'shell', arguments: { command: 'ls' } },
            ],
          },
          { content: 'gave up' },
        ],
      },
    });
    const { deps, events, root } = await setup();
    const reply = await runAgentStep(coder(model, { tools: ['read_file'] }), request, deps);

    expect(reply).toMatchObject({ ok: true, output: 'gave up' });
    expect(requests[0]?.tools.map((t) => t.name)).toEqual(['read_file']);
    const results = ofKind(events, 'tool.result').map((e) => e.data);
    expect(results).toEqual([
      expect.objectContaining({
        callId: 'call-1',
        ok: false,
        decision: 'deny',
        error: expect.objectContaining({ code: 'not_declared' }),
      }),
      expect.objectContaining({
        callId: 'call-2',
        ok: false,
        decision: 'deny',
        error: expect.objectContaining({ code: 'unknown_tool' }),
      }),
    ]);
    await expect(access(path.join(root, 'demo', 'task-1', 'sneaky.md'))).rejects.toThrow();
  });

  it('fails the step with the model error code and publishes llm.error', async () => {
    const { model } = recordingModel({ agents: { coder: [{ error: 'upstream 503' }] } });
    const { deps, events } = await setup();
    const reply = await runAgentStep(coder(model), request, deps);

    expect(reply).toEqual({
      ok: false,
      stepId: 'task-1.code.1',
      error: { code: 'scripted_failure', message: 'agent coder: model call failed: upstream 503' },
      usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 1 },
      turns: 1,
      askedPeople: true,
    });
    expect(events.map((e) => e.kind)).toEqual(['llm.request', 'llm.error']);
    expect(ofKind(events, 'llm.error')[0]?.data).toMatchObject({
      code: 'scripted_failure',
      message: 'upstream 503',
      provider: 'scripted',
    });
  });

  it('fails the step as for a rejection when its provider throws outright, and ends its wait on the model', async () => {
    const throwing: ModelProvider = {
      provider: 'broken',
      model: 'broken-1',
      complete: () => {
        throw new Error('no socket');
      },
    };
    const waits: boolean[] = [];
    const { deps, events } = await setup({ modelWait: (_stepId, waiting) => waits.push(waiting) });
    const reply = await runAgentStep(coder(throwing), request, deps);

    expect(reply).toMatchObject({
      ok: false,
      error: { code: 'model_failed', message: 'agent coder: model call failed: no socket' },
    });
    expect(events.map((e) => e.kind)).toEqual(['llm.request', 'llm.error']);
    // Told it waits, then that it no longer does: the host does not report a step parked on a model it never asked.
    expect(waits).toEqual([true, false]);
  });

  it('fails with script_exhausted when the model runs out of replies mid-step', async () => {
    const { model } = recordingModel({ agents: { coder: [{ toolCalls: [writeCall('a.md', 'a')] }] } });
    const { deps } = await setup();
    const reply = await runAgentStep(coder(model), request, deps);
    expect(reply).toMatchObject({ ok: false, turns: 2, error: { code: 'script_exhausted' } });
  });

  it('fails with max_steps when the agent keeps calling tools', async () => {
    const { model } = recordingModel({
      agents: { coder: [{ toolCalls: [writeCall('a.md', '1')] }, { toolCalls: [writeCall('a.md', '2')] }] },
    });
    const { deps } = await setup();
    const reply = await runAgentStep(coder(model, { maxTurns: 2 }), request, deps);
    expect(reply).toMatchObject({
      ok: false,
      turns: 2,
      error: { code: 'max_steps' },
      usage: { modelCalls: 2 },
    });
  });

  it('returns a verdict for a review step, asking for it in the system prompt', async () => {
    const { model, requests } = recordingModel({
      agents: { reviewer: [{ content: '```json\n{"decision": "reject", "feedback": "add a title"}\n```' }] },
    });
    const { deps } = await setup();
    const reviewer = coder(model, { name: 'reviewer', tools: [] });
    const reply = await runAgentStep(reviewer, { ...request, agent: 'reviewer', expect: 'verdict' }, deps);
    expect(reply).toMatchObject({ ok: true, verdict: { decision: 'reject', feedback: 'add a title' } });
    expect(requests[0]?.messages[0]?.content).toContain('reply with only a JSON object');
    expect(requests[0]?.tools).toEqual([]);
  });

  it('stops a step whose model call is in flight when it is sent a stop, replying aborted', async () => {
    const { model, requests } = recordingModel({
      agents: { coder: [{ content: 'too late', delayMs: 60_000 }] },
    });
    const { deps, events } = await setup();
    const step = startAgentStep(coder(model), request, deps);
    await vi.waitFor(() => expect(requests).toHaveLength(1));
    step.stop({ why: 'aborted' });
    const reply = await step.reply;

    expect(reply.ok).toBe(false);
    expect(reply.stepId).toBe('task-1.code.1');
    expect(!reply.ok && reply.error.code).toBe('aborted');
    // The model call is abandoned, not answered: nothing follows the request.
    expect(events.map((e) => e.kind)).toEqual(['llm.request']);
    expect(requests[0]?.signal?.aborted).toBe(true);
  });

  it('reports what a stopped step had spent, in a message that says why it stopped', async () => {
    const { model } = recordingModel({
      agents: {
        coder: [{ toolCalls: [{ name: 'list_files', arguments: {} }] }, { content: 'late', delayMs: 60_000 }],
      },
    });
    const { deps, events } = await setup();
    const step = startAgentStep(coder(model), request, deps);
    await vi.waitFor(() => expect(ofKind(events, 'llm.request')).toHaveLength(2));
    step.stop({ why: 'task_ended', taskId: 'task-1', ending: { status: 'cancelled' } });
    const reply = await step.reply;
    expect(reply.ok).toBe(false);
    if (reply.ok) return;
    expect(reply.error.code).toBe('aborted');
    expect(reply.error.message).toBe(
      'step task-1.code.1 was aborted after 2 model call(s): its task has ended',
    );
    expect(reply.turns).toBe(2);
    expect(reply.usage.modelCalls).toBe(2);
    expect(reply.usage.outputTokens).toBeGreaterThan(0);
  });

  it('asks the model nothing when the stop comes before the first call goes out', async () => {
    const { model, requests } = recordingModel({ agents: { coder: [{ content: 'slow', delayMs: 60_000 }] } });
    const { deps } = await setup();
    const step = startAgentStep(coder(model), request, deps);
    step.stop({ why: 'worker_stopping' });
    const reply = await step.reply;
    expect(reply).toMatchObject({
      ok: false,
      error: { code: 'worker_stopped', message: 'the worker serving coder stopped mid-step' },
    });
    expect(requests).toHaveLength(0);
  });

  it("stops itself when the request's timeout runs out, on the injected clock", async () => {
    const { model, requests } = recordingModel({ agents: { coder: [{ content: 'slow', delayMs: 60_000 }] } });
    const clock = new SimulatedClock();
    const { deps } = await setup({ clock });
    const step = startAgentStep(coder(model), { ...request, timeoutMs: 2_000 }, deps);
    await vi.waitFor(() => expect(requests).toHaveLength(1));
    clock.advance(1_999);
    let settled = false;
    void step.reply.then(() => {
      settled = true;
    });
    await Promise.resolve();
    expect(settled).toBe(false);
    clock.advance(1);
    expect(await step.reply).toMatchObject({
      ok: false,
      error: { code: 'step_timeout', message: 'agent coder did not finish within the step timeout (2 s)' },
    });
    expect(requests[0]?.signal?.aborted).toBe(true);
    expect(clock.pending()).toEqual([]);
  });

  it('replies with a failure instead of throwing when the agent declares a tool nobody registered', async () => {
    const { model, requests } = recordingModel({ agents: { coder: [{ content: 'never' }] } });
    const { deps } = await setup();
    const reply = await runAgentStep(coder(model, { tools: ['shell'] }), request, deps);
    expect(reply).toMatchObject({ ok: false, error: { code: 'unknown_tool' } });
    expect(!reply.ok && reply.error.message).toContain('shell');
    expect(requests).toHaveLength(0);
  });

  it('replies agent_crashed, with the error message, when the step fails with a code steps do not have', async () => {
    const { model, requests } = recordingModel({ agents: { coder: [{ content: 'never' }] } });
    const { deps } = await setup();
    const registry: ToolRegistry = Object.create(deps.registry);
    registry.definitions = () => {
      throw new Error('the registry is broken');
    };
    const reply = await runAgentStep(coder(model), request, { ...deps, registry });
    expect(reply).toMatchObject({
      ok: false,
      error: { code: 'agent_crashed', message: 'the registry is broken' },
    });
    expect(requests).toHaveLength(0);
  });

  it('fails the step with tool_runner_failed when the task workspace cannot be made', async () => {
    const { model } = recordingModel({
      agents: { coder: [{ toolCalls: [writeCall('notes/hello.md', '# Hi')] }, { content: 'never' }] },
    });
    const { deps, root } = await setup();
    // The workspace cannot be made under a file: mkdir fails with ENOTDIR or EEXIST.
    const file = path.join(root, 'not-a-dir');
    await writeFile(file, '');
    const reply = await runAgentStep(coder(model), request, { ...deps, workspaceRoot: file });
    expect(reply).toMatchObject({ ok: false, error: { code: 'tool_runner_failed' } });
    expect(!reply.ok && reply.error.message).toContain('not-a-dir');
  });
});

describe('runAgentStep: why a person’s pending request stopped', () => {
  /** A human gate that never decides; it keeps the reason each wait was stopped with. */
  function waitingHuman() {
    const reasons: unknown[] = [];
    let asked = 0;
    const human: StepDeps['human'] = {
      approve: (_ask, _scope, signal) =>
        new Promise((resolve) => {
          asked += 1;
          signal.addEventListener('abort', () => {
            reasons.push(signal.reason);
            resolve({ decision: 'deny', reason: 'stopped' });
          });
        }),
      ask: async () => 'never',
    };
    return { human, reasons, asked: () => asked };
  }
  const gated = () =>
    coder(
      recordingModel({
        agents: { coder: [{ toolCalls: [writeCall('notes/hello.md', '# Hi')] }, { content: 'x' }] },
      }).model,
      { rules: [{ tool: 'write_file', decision: 'ask' }] as AgentDefinition['rules'] },
    );

  it('is a TimeoutError coded step_timeout when the step runs out of its time', async () => {
    const { human, reasons, asked } = waitingHuman();
    const clock = new SimulatedClock();
    const { deps } = await setup({ clock, human });
    const step = startAgentStep(gated(), { ...request, timeoutMs: 2_000 }, deps);
    await vi.waitFor(() => expect(asked()).toBe(1));
    clock.advance(2_000);
    expect(await step.reply).toMatchObject({ ok: false, error: { code: 'step_timeout' } });
    expect(reasons).toHaveLength(1);
    expect(reasons[0]).toBeInstanceOf(StepTimedOutError);
    expect(reasons[0]).toMatchObject({
      name: 'TimeoutError',
      code: 'step_timeout',
      message: 'step task-1.code.1 ran out of time',
    });
  });

  it('is a BudgetExceeded coded budget_exceeded when the task’s deadline passes', async () => {
    const { human, reasons, asked } = waitingHuman();
    const clock = new SimulatedClock();
    const { deps } = await setup({ clock, human });
    const budget = { deadline: clock.now() + 1_000, sources: { deadline: 'task timeout (1 s)' } };
    const step = startAgentStep(gated(), { ...request, budget }, deps);
    await vi.waitFor(() => expect(asked()).toBe(1));
    clock.advance(1_000);
    expect(await step.reply).toMatchObject({ ok: false, error: { code: 'budget_exceeded' } });
    expect(AgentStepError.is(reasons[0], 'budget_exceeded')).toBe(true);
    expect(reasons[0]).toMatchObject({ name: 'BudgetExceeded' });
  });

  it('is coded aborted, naming why, for any other stop', async () => {
    const { human, reasons, asked } = waitingHuman();
    const { deps } = await setup({ human });
    const step = startAgentStep(gated(), request, deps);
    await vi.waitFor(() => expect(asked()).toBe(1));
    step.stop({ why: 'orphaned' });
    await step.reply;
    expect(AgentStepError.is(reasons[0], 'aborted')).toBe(true);
    expect(reasons[0]).toMatchObject({ message: 'step task-1.code.1 was stopped (orphaned)' });
  });
});

describe('runAgentStep: whether its step asked a person', () => {
  const script = (rules: AgentDefinition['rules'] = []) =>
    coder(
      recordingModel({
        agents: { coder: [{ toolCalls: [writeCall('notes/hello.md', '# Hi')] }, { content: 'done' }] },
      }).model,
      { rules },
    );
  const askRule = [{ tool: 'write_file', decision: 'ask' }] as AgentDefinition['rules'];
  const allowing = () => {
    let asked = 0;
    const human: StepDeps['human'] = {
      approve: async () => {
        asked += 1;
        return { decision: 'allow' };
      },
      ask: async () => 'yes',
    };
    return { human, asked: () => asked };
  };

  it('says it asked nobody when a fresh run asked nobody', async () => {
    const { human, asked } = allowing();
    const { deps } = await setup({ human });
    const reply = await runAgentStep(script(), { ...request, fresh: true }, deps);
    expect(reply).toMatchObject({ ok: true, askedPeople: false });
    expect(asked()).toBe(0);
  });

  it('says it asked when the run asked a person for an approval', async () => {
    const { human, asked } = allowing();
    const { deps } = await setup({ human });
    const reply = await runAgentStep(script(askRule), { ...request, fresh: true }, deps);
    expect(asked()).toBe(1);
    expect(reply).toMatchObject({ ok: true, askedPeople: true });
  });

  it('says it may have asked when a run may have come before it (not fresh), though this one asked nobody', async () => {
    const { human, asked } = allowing();
    const { deps } = await setup({ human });
    const reply = await runAgentStep(script(), request, deps);
    expect(asked()).toBe(0);
    expect(reply).toMatchObject({ ok: true, askedPeople: true });
  });

  it('says it asked when it was stopped while a person was asked', async () => {
    let asking = () => {};
    const waiting = new Promise<void>((resolve) => (asking = resolve));
    const human: StepDeps['human'] = {
      approve: (_ask, _scope, signal) =>
        new Promise((resolve) => {
          asking();
          signal.addEventListener('abort', () => resolve({ decision: 'deny', reason: 'stopped' }));
        }),
      ask: async () => 'never',
    };
    const { deps } = await setup({ human });
    const step = startAgentStep(script(askRule), { ...request, fresh: true }, deps);
    await waiting;
    step.stop({ why: 'orphaned' });
    expect(await step.reply).toMatchObject({ ok: false, askedPeople: true });
  });
});

describe('runAgentStep: a journal out of reach', () => {
  it('stops the step with journal_unavailable, for the workflow to send again, and runs no call unrecorded', async () => {
    const { model } = recordingModel({
      agents: { coder: [{ toolCalls: [writeCall('notes/hello.md', '# Hi')] }, { content: 'done' }] },
    });
    // Replies are best-effort; a tool call must be claimed before it runs, and here it cannot be.
    const journal = {
      recordedTurn: async () => ({ reply: () => undefined }),
      modelReply: async () => undefined,
      recordModelReply: async () => {},
      claimToolCall: async () => {
        throw new Error('TIMEOUT');
      },
    } as unknown as StepJournal;
    const { deps, root } = await setup({ journal });

    const reply = await runAgentStep(coder(model), request, deps);

    expect(reply).toMatchObject({ ok: false, error: { code: 'journal_unavailable' } });
    if (reply.ok) throw new Error('expected a failure');
    expect(reply.error.message).toMatch(/step journal cannot be reached: TIMEOUT/);
    await expect(access(path.join(root, 'demo', 'task-1', 'notes', 'hello.md'))).rejects.toThrow();
  });
});

/** A journal bucket in memory that counts its reads, as `MemoryKv` counts its writes. */
class CountingKv extends MemoryKv<JournalEntry> {
  reads: string[] = [];

  constructor() {
    super(JournalEntry);
  }

  override async get(key: string) {
    this.reads.push(key);
    return super.get(key);
  }
}

describe('runAgentStep: journal round trips', () => {
  const twoTurns = () =>
    recordingModel({
      agents: { coder: [{ toolCalls: [writeCall('notes/hello.md', '# Hi')] }, { content: 'done' }] },
    });

  it('reads only the first turn of a new step: its calls claimed new, nothing can be recorded after them', async () => {
    const kv = new CountingKv();
    const { deps } = await setup({ journal: new StepJournal(kv) });

    const reply = await runAgentStep(coder(twoTurns().model), request, deps);

    expect(reply).toMatchObject({ ok: true, output: 'done' });
    // No read of the claim before it is made, none of the second turn after a call claimed new.
    expect(kv.reads).toEqual([StepJournal.modelKey(request.stepId, 1)]);
    // Reply, claim, result, reply: every record is still made.
    expect(kv.writes).toBe(4);
  });

  it('reads nothing for a step the request says is fresh: no run of it can have started before', async () => {
    const kv = new CountingKv();
    const { deps } = await setup({ journal: new StepJournal(kv) });

    const reply = await runAgentStep(coder(twoTurns().model), { ...request, fresh: true }, deps);

    expect(reply).toMatchObject({ ok: true, output: 'done' });
    expect(kv.reads).toEqual([]);
    expect(kv.writes).toBe(4);
  });

  it('still replays every turn of a step run again, asking the model nothing', async () => {
    const kv = new CountingKv();
    const { deps, root } = await setup({ journal: new StepJournal(kv) });
    await runAgentStep(coder(twoTurns().model), request, deps);
    await rm(path.join(root, 'demo', 'task-1', 'notes', 'hello.md'));
    kv.reads = [];
    const again = twoTurns();

    const reply = await runAgentStep(coder(again.model), request, deps);

    expect(reply).toMatchObject({ ok: true, output: 'done' });
    expect(again.requests).toHaveLength(0);
    // The recorded call is not run again, and the second turn's reply is read, not asked for.
    await expect(access(path.join(root, 'demo', 'task-1', 'notes', 'hello.md'))).rejects.toThrow();
    // Each recorded record is read once, in order; nothing is written (no claim tried on a recorded call).
    expect(kv.reads).toEqual([
      StepJournal.modelKey(request.stepId, 1),
      StepJournal.toolKey(request.stepId, 1, 0),
      StepJournal.modelKey(request.stepId, 2),
    ]);
    expect(kv.writes).toBe(4);
  });

  it('makes no workspace for an agent without tools', async () => {
    const { model } = recordingModel({ agents: { coder: [{ content: 'nothing to write' }] } });
    const { deps, root } = await setup();

    const reply = await runAgentStep(coder(model, { tools: [] }), request, deps);

    expect(reply).toMatchObject({ ok: true, output: 'nothing to write' });
    await expect(stat(path.join(root, 'demo', 'task-1'))).rejects.toMatchObject({ code: 'ENOENT' });
  });
});

describe('startAgentStep: a pause and a message before the agent actor runs', () => {
  it('holds both while its workspace is brought here: the message is read, and the step stops before asking the model', async () => {
    const { model, requests } = recordingModel({ agents: { coder: [{ content: 'done' }] } });
    let pulled: () => void = () => {};
    const workspace = {
      pull: () => new Promise<void>((resolve) => (pulled = resolve)),
      push: async () => undefined,
    } as unknown as WorkspaceSync;
    const { deps } = await setup({ workspace });

    const step = startAgentStep(coder(model), request, deps);
    step.tell?.({ id: 'm1', text: 'use v2', at: '2026-12-06T00:00:00.000Z' });
    step.pause?.();
    pulled();

    expect(await step.reply).toMatchObject({ ok: false, error: { code: 'paused' }, turns: 0 });
    expect(requests).toHaveLength(0);

    // Not paused, the message it was told while it waited is read before its first model call.
    const again = startAgentStep(coder(model), request, deps);
    again.tell?.({ id: 'm1', text: 'use v2', at: '2026-12-06T00:00:00.000Z' });
    pulled();
    expect(await again.reply).toMatchObject({ ok: true, output: 'done', toldRead: ['m1'] });
    expect(requests[0]?.messages.at(-1)).toMatchObject({
      role: 'user',
      content: expect.stringContaining('use v2'),
    });
  });
});
