import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { InMemorySpanExporter, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { type ModelProvider, Script, ScriptedProvider } from '@troupe/llm';
import type { AgentStepRequest, TroupeEvent } from '@troupe/protocol';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { AgentDefinition } from '../../src/agent/agentDefinition.ts';
import { runAgentStep, type StepDeps } from '../../src/agent/agentStep.ts';
import { systemClock } from '../../src/events/clock.ts';
import { EventFactory } from '../../src/events/eventFactory.ts';
import { startTracing, startWorkflowSpan, type Tracing, traceparentOf } from '../../src/telemetry/tracing.ts';
import { fileTools, ToolRegistry } from '../../src/tools/index.ts';

const TRACE_ID = '0af7651916cd43dd8448eb211c80319c';
const PARENT_ID = 'b7ad6b7169203331';
const traceparent = `00-${TRACE_ID}-${PARENT_ID}-01`;

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
  traceparent,
};

const model = (script: unknown): ModelProvider => new ScriptedProvider(Script.parse(script));

function coder(provider: ModelProvider, overrides: Partial<AgentDefinition> = {}): AgentDefinition {
  return {
    name: 'coder',
    instructions: 'You write files.',
    model: provider,
    tools: ['write_file'],
    rules: [],
    maxTurns: 5,
    ...overrides,
  };
}

const writeTurns = {
  agents: {
    coder: [
      { toolCalls: [{ id: 'call-w', name: 'write_file', arguments: { path: 'hello.md', content: '# Hi' } }] },
      { content: 'Wrote hello.md.' },
    ],
  },
};

describe('traces', () => {
  let exporter: InMemorySpanExporter;
  let tracing: Tracing | undefined;
  let root: string;
  const events: TroupeEvent[] = [];

  const start = async (env: NodeJS.ProcessEnv = {}) => {
    tracing = await startTracing({ service: 'test', exporter, env });
  };
  const spans = async (): Promise<ReadableSpan[]> => {
    await tracing?.flush();
    return exporter.getFinishedSpans();
  };
  const deps = (): StepDeps => {
    const registry = new ToolRegistry();
    for (const tool of fileTools) registry.register(tool);
    return {
      registry,
      workspaceRoot: root,
      clock: systemClock,
      events: new EventFactory(systemClock),
      publish: (event) => events.push(event),
    };
  };

  beforeEach(async () => {
    exporter = new InMemorySpanExporter();
    root = await mkdtemp(path.join(os.tmpdir(), 'troupe-traces-'));
    events.length = 0;
  });
  afterEach(async () => {
    await tracing?.shutdown();
    tracing = undefined;
    await rm(root, { recursive: true, force: true });
  });

  it('starts nothing without an OTLP endpoint, or when the SDK is disabled', async () => {
    expect(await startTracing({ service: 'test', env: {} })).toBeUndefined();
    expect(
      await startTracing({
        service: 'test',
        env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:1', OTEL_SDK_DISABLED: 'true' },
      }),
    ).toBeUndefined();
    expect(
      await startTracing({
        service: 'test',
        env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:1', OTEL_TRACES_EXPORTER: 'none' },
      }),
    ).toBeUndefined();
  });

  it('makes no span, and changes no traceparent, while nothing is exported', async () => {
    const reply = await runAgentStep(coder(model(writeTurns)), request, deps());
    expect(reply.ok).toBe(true);
    expect(new Set(events.map((e) => e.traceparent))).toEqual(new Set([traceparent]));
    expect(exporter.getFinishedSpans()).toEqual([]);
  });

  it("gives a task's first workflow span the ids its traceparent names; a resumed run's is its child", async () => {
    await start();
    startWorkflowSpan('demo', traceparent, true, {}).end();
    startWorkflowSpan('demo', traceparent, false, {}).end();
    const [first, resumed] = await spans();
    expect(first?.spanContext()).toMatchObject({ traceId: TRACE_ID, spanId: PARENT_ID });
    expect(first?.parentSpanContext).toBeUndefined();
    expect(resumed?.spanContext().traceId).toBe(TRACE_ID);
    expect(resumed?.spanContext().spanId).not.toBe(PARENT_ID);
    expect(resumed?.parentSpanContext?.spanId).toBe(PARENT_ID);
    expect(first?.name).toBe('invoke_workflow demo');
  });

  it("sends a workflow span's sampling decision on: a task this process samples out is left out downstream too", async () => {
    process.env.OTEL_TRACES_SAMPLER = 'always_off';
    try {
      await start();
    } finally {
      delete process.env.OTEL_TRACES_SAMPLER;
    }
    const workflow = startWorkflowSpan('demo', traceparent, false, {});
    const sent = traceparentOf(workflow, traceparent);
    workflow.end();
    expect(sent).toMatch(new RegExp(`^00-${TRACE_ID}-[0-9a-f]{16}-00$`));
    // The agents' process samples by its parent, as the SDK does by default: the step makes no span.
    await tracing?.shutdown();
    exporter = new InMemorySpanExporter();
    await start();
    const reply = await runAgentStep(coder(model(writeTurns)), { ...request, traceparent: sent }, deps());
    expect(reply.ok).toBe(true);
    expect(await spans()).toEqual([]);
  });

  it('traces a step: the agent under the request’s span, its model calls and tool call under the agent', async () => {
    await start();
    const reply = await runAgentStep(coder(model(writeTurns)), request, deps());
    expect(reply.ok).toBe(true);
    const all = await spans();
    const agent = all.find((s) => s.name === 'invoke_agent coder');
    expect(agent?.parentSpanContext).toMatchObject({ traceId: TRACE_ID, spanId: PARENT_ID, isRemote: true });
    expect(agent?.attributes).toMatchObject({
      'gen_ai.operation.name': 'invoke_agent',
      'gen_ai.agent.name': 'coder',
      'gen_ai.provider.name': 'scripted',
      'troupe.step.id': 'task-1.code.1',
      'troupe.model_calls': 2,
    });
    const agentId = agent?.spanContext().spanId;
    const chats = all.filter((s) => s.name.startsWith('chat '));
    expect(chats.map((c) => c.attributes['troupe.turn'])).toEqual([1, 2]);
    for (const chat of chats) {
      expect(chat.parentSpanContext?.spanId).toBe(agentId);
      expect(chat.attributes).toMatchObject({
        'gen_ai.operation.name': 'chat',
        'gen_ai.request.model': expect.any(String),
        'gen_ai.usage.input_tokens': expect.any(Number),
        'gen_ai.usage.output_tokens': expect.any(Number),
      });
      expect(chat.attributes).not.toHaveProperty('gen_ai.input.messages');
    }
    expect(chats[0]?.attributes['gen_ai.response.finish_reasons']).toEqual(['tool_calls']);
    const tool = all.find((s) => s.name === 'execute_tool write_file');
    expect(tool?.parentSpanContext?.spanId).toBe(agentId);
    expect(tool?.attributes).toMatchObject({
      'gen_ai.tool.call.id': 'call-w',
      'troupe.tool.decision': 'allow',
    });
    expect(tool?.attributes).not.toHaveProperty('gen_ai.tool.call.arguments');
    // The step's events point at its span.
    const traced = `00-${TRACE_ID}-${agentId}-01`;
    expect(new Set(events.map((e) => e.traceparent))).toEqual(new Set([traced]));
  });

  it('says the prompt cache tokens read and written, on each model call and summed on the step', async () => {
    await start();
    const inner = model(writeTurns);
    const writes = [
      { cachedTokens: 0, cacheWriteTokens: 900, cacheWrite1hTokens: 900 },
      { cachedTokens: 900, cacheWriteTokens: 40 },
    ];
    let call = 0;
    const caching: ModelProvider = {
      provider: 'anthropic',
      model: 'claude-y',
      complete: async (req) => {
        const response = await inner.complete(req);
        return { ...response, usage: { ...response.usage, inputTokens: 1_000, ...writes[call++] } };
      },
    };
    await runAgentStep(coder(caching), request, deps());
    const all = await spans();
    const chats = all.filter((s) => s.name.startsWith('chat '));
    expect(
      chats.map((c) => [
        c.attributes['gen_ai.usage.cache_read.input_tokens'],
        c.attributes['gen_ai.usage.cache_creation.input_tokens'],
        c.attributes['troupe.usage.cache_creation_1h.input_tokens'],
      ]),
    ).toEqual([
      [0, 900, 900],
      [900, 40, undefined],
    ]);
    expect(all.find((s) => s.name === 'invoke_agent coder')?.attributes).toMatchObject({
      'gen_ai.usage.input_tokens': 2_000,
      'gen_ai.usage.cache_read.input_tokens': 900,
      'gen_ai.usage.cache_creation.input_tokens': 940,
    });
  });

  it('puts messages and tool arguments and results on spans only when content capture is opted into', async () => {
    await start({ OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'true' });
    await runAgentStep(coder(model(writeTurns)), request, deps());
    const all = await spans();
    const [first] = all.filter((s) => s.name.startsWith('chat '));
    expect(JSON.parse(String(first?.attributes['gen_ai.system_instructions']))).toEqual([
      { type: 'text', content: expect.stringContaining('You write files.') },
    ]);
    const input = JSON.parse(String(first?.attributes['gen_ai.input.messages']));
    expect(input[0]).toMatchObject({ role: 'user', parts: [{ type: 'text' }] });
    expect(JSON.parse(String(first?.attributes['gen_ai.output.messages']))).toEqual([
      {
        role: 'assistant',
        parts: [
          {
            type: 'tool_call',
            id: 'call-w',
            name: 'write_file',
            arguments: expect.stringContaining('hello.md'),
          },
        ],
        finish_reason: 'tool_calls',
      },
    ]);
    const tool = all.find((s) => s.name === 'execute_tool write_file');
    expect(tool?.attributes['gen_ai.tool.call.arguments']).toContain('# Hi');
    expect(tool?.attributes['gen_ai.tool.call.result']).toEqual(expect.any(String));
  });

  it('marks a failed model call and its step as errors, with the error code as error.type', async () => {
    await start();
    const reply = await runAgentStep(
      coder(model({ agents: { coder: [{ error: 'the scripted model fails' }] } })),
      request,
      deps(),
    );
    expect(reply.ok).toBe(false);
    const all = await spans();
    const chat = all.find((s) => s.name.startsWith('chat '));
    expect(chat?.status).toMatchObject({ code: 2 });
    expect(chat?.attributes['error.type']).toBe('scripted_failure');
    const agent = all.find((s) => s.name === 'invoke_agent coder');
    expect(agent?.status).toMatchObject({ code: 2 });
    expect(agent?.attributes['error.type']).toBe(!reply.ok && reply.error.code);
  });

  it('records a person’s decision as an await_approval span, with who decided', async () => {
    await start();
    const human: StepDeps['human'] = {
      approve: async () => ({ decision: 'allow', by: 'ana' }),
      ask: async () => 'yes',
    };
    const gated = coder(model(writeTurns), {
      rules: [{ tool: 'write_file', decision: 'ask' }] as AgentDefinition['rules'],
    });
    const reply = await runAgentStep(gated, request, { ...deps(), human });
    expect(reply.ok).toBe(true);
    const all = await spans();
    const approval = all.find((s) => s.name === 'await_approval write_file');
    const agent = all.find((s) => s.name === 'invoke_agent coder');
    expect(approval?.parentSpanContext?.spanId).toBe(agent?.spanContext().spanId);
    expect(approval?.attributes).toMatchObject({
      'gen_ai.tool.call.id': 'call-w',
      'troupe.approval.decision': 'allow',
      'troupe.approval.by': 'ana',
    });
  });
});
