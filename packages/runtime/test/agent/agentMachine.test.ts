import {
  type ChatMessage,
  ModelError,
  type ModelErrorCode,
  type ToolCall,
  type ToolDefinition,
  zeroUsage,
} from '@troupe/llm';
import type { ModelReply, ToolResult } from '@troupe/protocol';
import { SimulatedClock } from '@troupe/testkit';
import { describe, expect, it, vi } from 'vitest';
import { createActor, fromPromise, toPromise } from 'xstate';
import {
  type AgentEmitted,
  type AgentMachineInput,
  type AgentOutput,
  type AgentServices,
  agentMachine,
  type ModelCallInput,
  type ModelCallOutput,
} from '../../src/agent/agentMachine.ts';
import { parseVerdict } from '../../src/agent/structuredReply.ts';

/** Every model error code; the type makes a new code fail to compile here until it is listed. */
const MODEL_ERROR_CODES: Record<ModelErrorCode, true> = {
  script_exhausted: true,
  scripted_failure: true,
  rate_limited: true,
  server_error: true,
  timeout: true,
  connection: true,
  bad_request: true,
  auth: true,
  not_found: true,
  invalid_response: true,
  aborted: true,
  config: true,
};

const writeFile: ToolDefinition = {
  name: 'write_file',
  description: 'Write a file',
  parameters: { type: 'object' },
};
const readFile: ToolDefinition = {
  name: 'read_file',
  description: 'Read a file',
  parameters: { type: 'object' },
};

const opening: ChatMessage[] = [
  { role: 'system', content: 'You are the coder.' },
  { role: 'user', content: '# Task\nwrite hello.md' },
];

const baseInput: AgentMachineInput = {
  agent: 'coder',
  stepId: 'task-1.code.1',
  messages: opening,
  tools: [writeFile, readFile],
  maxTurns: 5,
  expect: 'text',
};

/** A model reply; text unless tool calls are given. */
function reply(
  content: string,
  toolCalls: ToolCall[] = [],
  usage = { inputTokens: 10, outputTokens: 2 },
): ModelReply {
  return {
    content,
    toolCalls,
    usage: { ...usage, cachedTokens: 0 },
    costUsd: 0,
    finishReason: toolCalls.length > 0 ? 'tool_calls' : 'stop',
    provider: 'fake',
    model: 'fake-1',
    durationMs: 3,
  };
}

const call = (
  id: string,
  name = 'write_file',
  args: unknown = { path: 'hello.md', content: 'hi' },
): ToolCall => ({
  id,
  name,
  arguments: JSON.stringify(args),
});

function result(callId: string, ok = true, output = ok ? 'wrote 2 bytes' : 'refused'): ToolResult {
  return {
    callId,
    tool: 'write_file',
    ok,
    output,
    decision: ok ? 'allow' : 'deny',
    ...(ok ? {} : { error: { code: 'denied', message: output } }),
    durationMs: 1,
  };
}

type ModelInput = ModelCallInput;
type ToolsInput = { calls: readonly ToolCall[]; turn: number };

interface Run {
  output: AgentOutput;
  emitted: AgentEmitted[];
  modelInputs: ModelInput[];
  toolInputs: ToolsInput[];
}

/**
 * Runs the machine with a model that gives `replies` in order (an `Error` or other value is thrown instead)
 * and a tool runner that answers with `tools` (defaults to every call succeeding).
 */
async function run(
  replies: (ModelReply | Error | string)[],
  options: {
    input?: Partial<AgentMachineInput>;
    tools?: (input: ToolsInput) => Promise<ToolResult[]>;
  } = {},
): Promise<Run> {
  const queue = [...replies];
  const modelInputs: ModelInput[] = [];
  const toolInputs: ToolsInput[] = [];
  const runTools = options.tools ?? (async ({ calls }: ToolsInput) => calls.map((c) => result(c.id)));
  const machine = agentMachine.provide({
    actors: {
      callModel: fromPromise<ModelReply, ModelInput>(async ({ input }) => {
        modelInputs.push(input);
        const next = queue.shift();
        if (next === undefined) throw new Error('the test model has no more replies');
        if (typeof next === 'string' || next instanceof Error) throw next;
        return next;
      }),
      runTools: fromPromise<ToolResult[], ToolsInput>(async ({ input }) => {
        toolInputs.push(input);
        return runTools(input);
      }),
    },
  });
  const actor = createActor(machine, { input: { ...baseInput, ...options.input } });
  const emitted: AgentEmitted[] = [];
  actor.on('*', (event) => emitted.push(event));
  actor.start();
  const output = await toPromise(actor);
  return { output, emitted, modelInputs, toolInputs };
}

const verdictInput = { input: { expect: 'verdict' as const } };

describe('agentMachine: text replies', () => {
  it('finishes with the text of a reply that asks for no tools', async () => {
    const { output, modelInputs, toolInputs } = await run([reply('hello.md is written')]);
    expect(output).toMatchObject({ ok: true, output: 'hello.md is written', turns: 1 });
    expect(output).not.toHaveProperty('failure');
    expect(output).not.toHaveProperty('verdict');
    expect(output.messages).toEqual([...opening, { role: 'assistant', content: 'hello.md is written' }]);
    expect(modelInputs).toEqual([
      { messages: opening, tools: [writeFile, readFile], turn: 1, callsBefore: 0 },
    ]);
    expect(toolInputs).toEqual([]);
  });

  it('emits the request, then the response with the reply', async () => {
    const { emitted } = await run([reply('done')]);
    expect(emitted).toEqual([
      { type: 'llm.request', turn: 1, messages: 2, tools: ['write_file', 'read_file'] },
      { type: 'llm.response', turn: 1, ...reply('done') },
    ]);
  });

  it('does not read a verdict from a text step, even when the reply is one', async () => {
    const { output } = await run([reply('{"decision": "approve"}')]);
    expect(output.ok).toBe(true);
    expect(output).not.toHaveProperty('verdict');
  });
});

describe('agentMachine: tool calls', () => {
  it('runs the calls, appends their results as tool messages and asks the model again', async () => {
    const calls = [call('c1'), call('c2', 'read_file', { path: 'missing.md' })];
    const { output, modelInputs, toolInputs } = await run([reply('', calls), reply('all done')], {
      tools: async () => [result('c1'), { ...result('c2', false, 'no such file'), tool: 'read_file' }],
    });

    expect(toolInputs).toEqual([{ calls, turn: 1 }]);
    const afterTools: ChatMessage[] = [
      ...opening,
      { role: 'assistant', content: '', toolCalls: calls },
      { role: 'tool', toolCallId: 'c1', name: 'write_file', content: 'wrote 2 bytes' },
      { role: 'tool', toolCallId: 'c2', name: 'read_file', content: 'no such file', isError: true },
    ];
    expect(modelInputs[1]).toEqual({
      messages: afterTools,
      tools: [writeFile, readFile],
      turn: 2,
      callsBefore: 1,
    });
    expect(modelInputs[1]?.messages[3]).not.toHaveProperty('isError');
    expect(output).toMatchObject({ ok: true, output: 'all done', turns: 2 });
    expect(output.messages).toEqual([...afterTools, { role: 'assistant', content: 'all done' }]);
  });

  it('emits request, response, every call, every result, then the next request', async () => {
    const calls = [call('c1'), call('c2')];
    const { emitted } = await run([reply('writing', calls), reply('done')], {
      tools: async () => [result('c1'), result('c2', false)],
    });
    expect(emitted.map((e) => e.type)).toEqual([
      'llm.request',
      'llm.response',
      'tool.call',
      'tool.call',
      'tool.result',
      'tool.result',
      'llm.request',
      'llm.response',
    ]);
    expect(emitted[2]).toEqual({
      type: 'tool.call',
      turn: 1,
      index: 0,
      callId: 'c1',
      tool: 'write_file',
      arguments: calls[0]?.arguments,
    });
    expect(emitted[3]).toMatchObject({ type: 'tool.call', index: 1, callId: 'c2' });
    expect(emitted[4]).toEqual({ type: 'tool.result', turn: 1, index: 0, ...result('c1') });
    expect(emitted[5]).toEqual({ type: 'tool.result', turn: 1, index: 1, ...result('c2', false) });
    // The second request counts the assistant message and both tool results.
    expect(emitted[6]).toEqual({
      type: 'llm.request',
      turn: 2,
      messages: 5,
      tools: ['write_file', 'read_file'],
    });
    expect(emitted[7]).toMatchObject({ type: 'llm.response', turn: 2, content: 'done' });
  });

  it('fails with max_steps when the model is still calling tools at its last turn', async () => {
    const { output, modelInputs, toolInputs, emitted } = await run(
      [reply('', [call('c1')]), reply('', [call('c2')]), reply('never asked')],
      { input: { maxTurns: 2 } },
    );
    expect(output.ok).toBe(false);
    expect(output.failure).toEqual({
      code: 'max_steps',
      message: 'agent coder reached its limit of 2 model calls without finishing',
    });
    expect(output.turns).toBe(2);
    expect(output.output).toBe('');
    expect(modelInputs).toHaveLength(2);
    expect(toolInputs).toHaveLength(2);
    expect(emitted.filter((e) => e.type === 'llm.request')).toHaveLength(2);
  });

  it('fails with max_steps before any call when it has no turns at all', async () => {
    const { output, modelInputs, emitted } = await run([reply('never asked')], { input: { maxTurns: 0 } });
    expect(output).toMatchObject({ ok: false, turns: 0, failure: { code: 'max_steps' } });
    expect(modelInputs).toEqual([]);
    expect(emitted).toEqual([]);
  });

  it('takes a reply with tool calls and no text as a tool turn, not an empty reply', async () => {
    const { output } = await run([reply('   ', [call('c1')]), reply('done')]);
    expect(output).toMatchObject({ ok: true, output: 'done' });
  });

  it('fails with tool_runner_failed when the tool runner itself rejects', async () => {
    const { output, emitted } = await run([reply('', [call('c1')])], {
      tools: async () => {
        throw new Error('executor crashed');
      },
    });
    expect(output.ok).toBe(false);
    expect(output.failure).toEqual({
      code: 'tool_runner_failed',
      message: 'agent coder: the tool runner failed: executor crashed',
    });
    expect(emitted.map((e) => e.type)).toEqual(['llm.request', 'llm.response', 'tool.call']);
  });
});

describe('agentMachine: failures', () => {
  it.each([
    ['empty', ''],
    ['blank', ' \n\t '],
  ])(
    'fails with empty_reply on a %s reply with no tool calls, still recording the reply',
    async (_label, content) => {
      const { output, emitted } = await run([reply(content)]);
      expect(output.ok).toBe(false);
      expect(output.failure).toEqual({
        code: 'empty_reply',
        message: 'agent coder: the model returned an empty reply with no tool calls',
      });
      expect(output.turns).toBe(1);
      expect(output.usage).toEqual({ inputTokens: 10, outputTokens: 2, cachedTokens: 0 });
      expect(output.messages.at(-1)).toEqual({ role: 'assistant', content });
      expect(emitted.map((e) => e.type)).toEqual(['llm.request', 'llm.response']);
    },
  );

  it('fails with the code of a model error and emits llm.error', async () => {
    const { output, emitted } = await run([new ModelError('rate_limited', '429 Too Many Requests')]);
    expect(output.ok).toBe(false);
    expect(output.failure).toEqual({
      code: 'rate_limited',
      message: 'agent coder: model call failed: 429 Too Many Requests',
    });
    expect(output.turns).toBe(1);
    expect(emitted).toEqual([
      { type: 'llm.request', turn: 1, messages: 2, tools: ['write_file', 'read_file'] },
      { type: 'llm.error', turn: 1, code: 'rate_limited', message: '429 Too Many Requests' },
    ]);
  });

  it('fails the step with each model error code, which steps know', async () => {
    for (const code of Object.keys(MODEL_ERROR_CODES) as ModelErrorCode[]) {
      const { output } = await run([new ModelError(code, 'failed')]);
      expect(output.failure?.code).toBe(code);
    }
  });

  it('uses model_failed for a code steps do not know, which llm.error still names', async () => {
    const error = Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
    const { output, emitted } = await run([error]);
    expect(output.failure?.code).toBe('model_failed');
    expect(emitted.at(-1)).toMatchObject({
      type: 'llm.error',
      code: 'ECONNRESET',
      message: 'socket hang up',
    });
  });

  it('uses model_failed when the error has no string code', async () => {
    const numbered = Object.assign(new Error('odd'), { code: 42 });
    expect((await run([new Error('boom')])).output.failure?.code).toBe('model_failed');
    expect((await run([numbered])).output.failure?.code).toBe('model_failed');
  });

  it('describes a thrown non-Error by its text', async () => {
    const { output, emitted } = await run(['plain string failure']);
    expect(output.failure).toEqual({
      code: 'model_failed',
      message: 'agent coder: model call failed: plain string failure',
    });
    expect(emitted.at(-1)).toEqual({
      type: 'llm.error',
      turn: 1,
      code: 'model_failed',
      message: 'plain string failure',
    });
  });

  it('fails on a model error at a later turn, keeping what came before', async () => {
    const { output } = await run([reply('', [call('c1')]), new ModelError('timeout', 'took too long')]);
    expect(output).toMatchObject({ ok: false, turns: 2, failure: { code: 'timeout' } });
    expect(output.usage.inputTokens).toBe(10);
    expect(output.messages.filter((m) => m.role === 'tool')).toHaveLength(1);
  });
});

describe('agentMachine: verdicts', () => {
  it('reads a verdict from a JSON reply and keeps the raw reply as output', async () => {
    const text = '{"decision": "reject", "feedback": "add a title"}';
    const { output } = await run([reply(text)], verdictInput);
    expect(output).toMatchObject({
      ok: true,
      output: text,
      verdict: { decision: 'reject', feedback: 'add a title' },
    });
  });

  it('reads a verdict inside a ```json fence', async () => {
    const text = 'Looks good.\n```json\n{"decision": "approve"}\n```';
    const { output } = await run([reply(text)], verdictInput);
    expect(output.verdict).toEqual({ decision: 'approve', feedback: '' });
    expect(output.output).toBe(text);
  });

  it('asks once for a valid verdict when the reply is not one, then finishes', async () => {
    const { output, modelInputs, emitted } = await run(
      [reply('I think it is fine.'), reply('{"decision": "approve", "feedback": "fine"}')],
      verdictInput,
    );
    expect(output).toMatchObject({ ok: true, turns: 2, verdict: { decision: 'approve', feedback: 'fine' } });
    const second = modelInputs[1]?.messages ?? [];
    expect(second).toHaveLength(4);
    expect(second[2]).toEqual({ role: 'assistant', content: 'I think it is fine.' });
    expect(second[3]?.role).toBe('user');
    expect(second[3]?.content).toContain('not a valid verdict');
    expect(second[3]?.content).toContain('JSON object');
    expect(emitted.map((e) => e.type)).toEqual([
      'llm.request',
      'llm.response',
      'llm.request',
      'llm.response',
    ]);
  });

  it('fails with invalid_output when the repaired reply is still not a verdict', async () => {
    const { output, modelInputs } = await run(
      [reply('approve'), reply('{"decision": "maybe"}'), reply('{"decision": "approve"}')],
      verdictInput,
    );
    expect(output.ok).toBe(false);
    expect(output.failure?.code).toBe('invalid_output');
    expect(output.failure?.message).toContain('after 1 repair turn(s)');
    expect(output.turns).toBe(2);
    expect(output).not.toHaveProperty('verdict');
    expect(modelInputs).toHaveLength(2);
  });

  it('stops at max_steps when no turn is left for the repair', async () => {
    const { output, modelInputs } = await run([reply('approve'), reply('{"decision": "approve"}')], {
      input: { expect: 'verdict', maxTurns: 1 },
    });
    expect(output.failure?.code).toBe('max_steps');
    expect(modelInputs).toHaveLength(1);
  });

  it('lets a reviewer use tools before giving its verdict', async () => {
    const { output } = await run(
      [reply('', [call('c1', 'read_file')]), reply('{"decision": "approve"}')],
      verdictInput,
    );
    expect(output).toMatchObject({ ok: true, turns: 2, verdict: { decision: 'approve' } });
  });
});

describe('agentMachine: usage', () => {
  it('sums tokens and cost over every turn, including the repair', async () => {
    const first = { ...reply('', [call('c1')], { inputTokens: 100, outputTokens: 20 }), costUsd: 0.01 };
    const second = {
      ...reply('not json', [], { inputTokens: 150, outputTokens: 5 }),
      usage: { inputTokens: 150, outputTokens: 5, cachedTokens: 100 },
      costUsd: 0.02,
    };
    const third = {
      ...reply('{"decision": "approve"}', [], { inputTokens: 170, outputTokens: 9 }),
      costUsd: 0.03,
    };
    const { output } = await run([first, second, third], verdictInput);
    expect(output.ok).toBe(true);
    expect(output.turns).toBe(3);
    expect(output.usage).toEqual({ inputTokens: 420, outputTokens: 34, cachedTokens: 100 });
    expect(output.costUsd).toBeCloseTo(0.06, 10);
  });
});

describe('parseVerdict', () => {
  it.each([
    ['bare JSON', '{"decision":"approve","feedback":"ok"}', { decision: 'approve', feedback: 'ok' }],
    [
      'JSON with surrounding whitespace',
      '\n  {"decision":"reject","feedback":"x"}  \n',
      { decision: 'reject', feedback: 'x' },
    ],
    ['JSON without feedback', '{"decision":"approve"}', { decision: 'approve', feedback: '' }],
    [
      'a ```json fence',
      '```json\n{"decision":"reject","feedback":"more tests"}\n```',
      { decision: 'reject', feedback: 'more tests' },
    ],
    ['a bare ``` fence', '```\n{"decision":"approve"}\n```', { decision: 'approve', feedback: '' }],
    [
      'prose around the object',
      'My verdict: {"decision":"approve"} — thanks.',
      { decision: 'approve', feedback: '' },
    ],
    [
      'braces inside the feedback',
      '{"decision":"reject","feedback":"rename {a} to {b}"}',
      { decision: 'reject', feedback: 'rename {a} to {b}' },
    ],
    ['the object inside a JSON array', '[{"decision":"approve"}]', { decision: 'approve', feedback: '' }],
    [
      'the verdict followed by other braces',
      '{"decision":"approve","feedback":"ok"}\nNext time use {braces}.',
      { decision: 'approve', feedback: 'ok' },
    ],
    [
      'an example object before the verdict',
      'Not {"like":"this"} but:\n```json\n{"decision":"reject","feedback":"a \\"quoted\\" } brace"}\n```',
      { decision: 'reject', feedback: 'a "quoted" } brace' },
    ],
    [
      'a multi-line object',
      'Verdict:\n{\n  "decision": "reject",\n  "feedback": "line one\\nline two"\n}\n',
      { decision: 'reject', feedback: 'line one\nline two' },
    ],
  ])('reads %s', (_label, text, expected) => {
    expect(parseVerdict(text)).toEqual(expected);
  });

  it.each([
    ['an empty reply', ''],
    ['plain words', 'approve'],
    ['a closing brace alone', 'ok }'],
    ['braces in the wrong order', '} {'],
    ['an unknown decision', '{"decision":"maybe"}'],
    ['a capitalised decision', '{"decision":"Approve"}'],
    ['an extra key', '{"decision":"approve","score":9}'],
    ['feedback that is not text', '{"decision":"approve","feedback":3}'],
    ['no decision', '{"feedback":"ok"}'],
    ['broken JSON', '{"decision":"approve",}'],
    ['a JSON string', '"approve"'],
    ['null', 'null'],
  ])('refuses %s', (_label, text) => {
    expect(parseVerdict(text)).toBeUndefined();
  });
});

describe('agentMachine: summaries count as model calls', () => {
  it('stops before the next model call when a summary used up the model-call budget', async () => {
    let calls = 0;
    const machine = agentMachine.provide({
      actors: {
        callModel: fromPromise<ModelReply, ModelCallInput>(async () => {
          calls++;
          return reply('', [{ id: `c${calls}`, name: 'write_file', arguments: '{}' }]);
        }),
        runTools: fromPromise<ToolResult[], ToolsInput>(async ({ input }) =>
          input.calls.map((c) => result(c.id)),
        ),
        compactConversation: fromPromise(async () => ({
          summary: 'the story so far',
          usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0 },
          costUsd: 0,
        })),
      },
    });
    // Four turns fill the conversation past its tiny budget; the summary is the fifth call of five allowed.
    const actor = createActor(machine, {
      input: { ...baseInput, maxTurns: 10, contextTokens: 1, budget: { modelCalls: 5, sources: {} } },
    });
    actor.start();
    const output = await toPromise(actor);
    expect(calls).toBe(4);
    expect(output).toMatchObject({
      ok: false,
      turns: 4,
      compactions: 1,
      failure: { code: 'budget_exceeded' },
    });
    expect(output.failure?.message).toMatch(/5 of 5 model calls/);
  });
});

describe('agent machine services', () => {
  it('does its work through the services in its input, one machine for every step', async () => {
    const asked: { turn: number; services: unknown }[] = [];
    const checked: string[] = [];
    const ran: (readonly ToolCall[])[] = [];
    const services: AgentServices = {
      callModel: async (input) => {
        asked.push({ turn: input.turn, services: (input as { services?: unknown }).services });
        return input.turn === 1 ? reply('', [call('c1', 'write_file')]) : reply('done');
      },
      checkTools: async ({ calls }) =>
        calls.map((c) => {
          checked.push(c.id);
          return { callId: c.id, tool: c.name, decision: 'allow' as const, reason: 'rule 1' };
        }),
      runTools: async ({ calls }) => {
        ran.push(calls);
        return calls.map((c) => result(c.id));
      },
      compactConversation: async () => {
        throw new Error('not expected');
      },
    };
    const outputs: AgentOutput[] = [];
    for (const stepId of ['task-1.code.1', 'task-2.code.1']) {
      const actor = createActor(agentMachine, { input: { ...baseInput, stepId, services } });
      actor.start();
      outputs.push(await toPromise(actor));
    }
    expect(outputs.map((o) => [o.ok, o.output, o.turns])).toEqual([
      [true, 'done', 2],
      [true, 'done', 2],
    ]);
    expect(asked.map((a) => a.turn)).toEqual([1, 2, 1, 2]);
    expect(asked.every((a) => a.services === services)).toBe(true);
    expect(checked).toEqual(['c1', 'c1']);
    expect(ran.map((calls) => calls.map((c) => c.id))).toEqual([['c1'], ['c1']]);
  });

  it('fails the step, naming the missing service, when the input gives none', async () => {
    const actor = createActor(agentMachine, { input: baseInput });
    actor.start();
    const output = await toPromise(actor);
    expect(output.ok).toBe(false);
    expect(output.failure?.message).toMatch(/callModel is not provided/);
  });
});

describe('agentMachine: stops and time limits', () => {
  /**
   * A machine on a simulated clock whose model call never answers: it waits until its signal aborts, and records
   * whether the services heard of the stop before that.
   */
  function hanging(input: Partial<AgentMachineInput> = {}, extra: Partial<AgentServices> = {}) {
    const clock = new SimulatedClock();
    const seen: string[] = [];
    const services: AgentServices = {
      callModel: (_input, signal) =>
        new Promise<ModelReply>((_resolve, reject) => {
          seen.push('asked');
          signal.addEventListener('abort', () => {
            seen.push('model call aborted');
            reject(signal.reason);
          });
        }),
      runTools: async ({ calls }) => calls.map((c) => result(c.id)),
      compactConversation: async () => ({ summary: 's', usage: zeroUsage(), costUsd: 0 }),
      stopping: (stop) => seen.push(`told ${stop.why}`),
      ...extra,
    };
    const actor = createActor(agentMachine, { clock, input: { ...baseInput, ...input, services } });
    const emitted: AgentEmitted[] = [];
    actor.on('*', (event) => emitted.push(event));
    actor.start();
    return { actor, clock, seen, emitted, output: toPromise(actor) };
  }

  it('stops on a stop event: the services are told first, then the model call is aborted', async () => {
    const { actor, seen, emitted, output } = hanging();
    actor.send({
      type: 'stop',
      stop: { why: 'task_ended', taskId: 'task-1', ending: { status: 'cancelled' } },
    });
    expect(actor.getSnapshot().value).toBe('stopped');
    expect(seen).toEqual(['asked', 'told task_ended', 'model call aborted']);
    expect(await output).toMatchObject({
      ok: false,
      turns: 1,
      failure: {
        code: 'aborted',
        message: 'step task-1.code.1 was aborted after 1 model call(s): its task has ended',
      },
    });
    // The abandoned call is neither answered nor failed in the step's events.
    expect(emitted.map((e) => e.type)).toEqual(['llm.request']);
  });

  it('tells a step stopped for want of a requester, and one stopped by its worker, apart', async () => {
    const orphaned = hanging();
    orphaned.actor.send({ type: 'stop', stop: { why: 'orphaned' } });
    expect((await orphaned.output).failure?.message).toContain('nobody waits for its reply any more');
    const stopping = hanging();
    stopping.actor.send({ type: 'stop', stop: { why: 'worker_stopping' } });
    expect((await stopping.output).failure).toEqual({
      code: 'worker_stopped',
      message: 'the worker serving coder stopped mid-step',
    });
  });

  it('stops itself with step_timeout when timeoutMs passes, in simulated time', async () => {
    const { actor, clock, seen, output } = hanging({ timeoutMs: 30_000 });
    clock.advance(29_999);
    expect(actor.getSnapshot().value).toEqual({ working: 'thinking' });
    clock.advance(1);
    expect(seen).toEqual(['asked', 'told step_timeout', 'model call aborted']);
    expect((await output).failure).toEqual({
      code: 'step_timeout',
      message: 'agent coder did not finish within the step timeout (30 s)',
    });
  });

  it('names the person a timed-out step was waiting for: approval_timeout', async () => {
    const { clock, output } = hanging(
      { timeoutMs: 5_000 },
      { waitingOn: () => ({ kind: 'approval', id: 'appr-7' }) },
    );
    clock.advance(5_000);
    expect((await output).failure).toMatchObject({ code: 'approval_timeout' });
    expect((await output).failure?.message).toContain('appr-7');
  });

  it('stops with budget_exceeded when the task deadline comes before the step timeout', async () => {
    const budget = { deadline: 0, sources: { deadline: 'pipeline demo timeout (10 min)' } };
    const { clock, seen, output } = hanging({ timeoutMs: 30_000, timeLeftMs: 1_000, budget });
    clock.advance(1_000);
    expect(seen).toContain('told deadline');
    expect((await output).failure).toEqual({
      code: 'budget_exceeded',
      message: 'agent coder: pipeline demo timeout (10 min) ran out; the step was stopped',
    });
  });

  it('leaves no timer behind when the step ends before its time limit', async () => {
    const clock = new SimulatedClock();
    const services: AgentServices = {
      callModel: async () => reply('done'),
      runTools: async () => [],
      compactConversation: async () => ({ summary: 's', usage: zeroUsage(), costUsd: 0 }),
    };
    const actor = createActor(agentMachine, { clock, input: { ...baseInput, timeoutMs: 60_000, services } });
    expect(clock.pending()).toEqual([]);
    actor.start();
    expect(clock.pending()).toHaveLength(1);
    expect(await toPromise(actor)).toMatchObject({ ok: true, output: 'done' });
    expect(clock.pending()).toEqual([]);
  });

  it('ignores a halted event sent from outside: only a stop with a reason stops the step', () => {
    const { actor } = hanging();
    actor.send({ type: 'halted' });
    expect(actor.getSnapshot().value).toEqual({ working: 'thinking' });
  });

  it('sets no timer for a step without a time limit, and never stops it for time', async () => {
    const { clock, actor, seen } = hanging();
    expect(clock.pending()).toEqual([]);
    clock.advance(365 * 24 * 3_600_000);
    expect(actor.getSnapshot().value).toEqual({ working: 'thinking' });
    expect(seen).toEqual(['asked']);
    actor.send({ type: 'stop', stop: { why: 'aborted' } });
    expect(actor.getSnapshot().value).toBe('stopped');
  });
});

describe('agentMachine: a pause of its task', () => {
  /** A machine whose model and tools answer when the test says so, each call kept with its input. */
  function held(input: Partial<AgentMachineInput> = {}, decision: 'allow' | 'ask' = 'ask') {
    const modelCalls: { input: ModelCallInput; answer: (reply: ModelCallOutput) => void }[] = [];
    const toolRuns: { calls: readonly ToolCall[]; finish: () => void }[] = [];
    const approvals: { finish: () => void }[] = [];
    const services: AgentServices = {
      callModel: (callInput) =>
        new Promise((resolve) => modelCalls.push({ input: callInput, answer: resolve })),
      runTools: ({ calls }) =>
        new Promise((resolve) =>
          toolRuns.push({ calls, finish: () => resolve(calls.map((c) => result(c.id))) }),
        ),
      compactConversation: async () => ({ summary: 's', usage: zeroUsage(), costUsd: 0 }),
      checkTools: async ({ calls }) =>
        calls.map((c) => ({ callId: c.id, tool: c.name, decision, reason: 'the policy says so' })),
      awaitApprovals: ({ calls }) =>
        new Promise((resolve) =>
          approvals.push({
            finish: () => resolve(Object.fromEntries(calls.map((c) => [c.callId, { decision: 'allow' }]))),
          }),
        ),
    };
    const actor = createActor(agentMachine, { input: { ...baseInput, ...input, services } });
    actor.start();
    return { actor, modelCalls, toolRuns, approvals, output: toPromise(actor) };
  }
  const settle = () => new Promise((resolve) => setTimeout(resolve, 0));
  const paused = {
    code: 'paused',
    message:
      'step task-1.code.1 was paused after 1 model call(s): its task was paused; sent again on resume, it goes on from its journal',
  };

  it('lets the model call finish, keeps its reply, and stops before the tools it asked for run', async () => {
    const { actor, modelCalls, toolRuns, output } = held();
    await vi.waitFor(() => expect(modelCalls).toHaveLength(1));
    actor.send({ type: 'pause' });
    // Not cut short: the call goes on until it answers.
    expect(actor.getSnapshot().value).toEqual({ working: 'thinking' });
    modelCalls[0]?.answer(reply('', [call('c1')]));
    const ended = await output;
    expect(ended).toMatchObject({ ok: false, turns: 1, failure: paused });
    expect(ended.usage).toMatchObject({ inputTokens: 10, outputTokens: 2 });
    expect(ended.messages.at(-1)).toMatchObject({ role: 'assistant', toolCalls: [{ id: 'c1' }] });
    expect(modelCalls).toHaveLength(1);
    expect(toolRuns).toHaveLength(0);
  });

  it('finishes a step whose model call gives its final reply while paused: nothing is left to hold', async () => {
    const { actor, modelCalls, output } = held();
    await vi.waitFor(() => expect(modelCalls).toHaveLength(1));
    actor.send({ type: 'pause' });
    modelCalls[0]?.answer(reply('all done'));
    expect(await output).toMatchObject({ ok: true, output: 'all done' });
  });

  it('lets the tool calls under way finish, then stops before the next model call', async () => {
    const { actor, modelCalls, toolRuns, output } = held({}, 'allow');
    await vi.waitFor(() => expect(modelCalls).toHaveLength(1));
    modelCalls[0]?.answer(reply('', [call('c1'), call('c2', 'read_file')]));
    await vi.waitFor(() => expect(toolRuns).toHaveLength(1));
    actor.send({ type: 'pause' });
    await settle();
    expect(actor.getSnapshot().value).toEqual({ working: 'running' });
    toolRuns[0]?.finish();
    const ended = await output;
    expect(ended).toMatchObject({ ok: false, turns: 1, failure: paused });
    // Both results are in the conversation the step goes on from.
    expect(ended.messages.slice(-2).map((m) => m.role)).toEqual(['tool', 'tool']);
    expect(modelCalls).toHaveLength(1);
  });

  it('waits for the person a tool call waits on, runs the call, then stops: no second model call', async () => {
    const { actor, modelCalls, toolRuns, approvals, output } = held();
    await vi.waitFor(() => expect(modelCalls).toHaveLength(1));
    modelCalls[0]?.answer(reply('', [call('c1')]));
    await vi.waitFor(() => expect(approvals).toHaveLength(1));
    actor.send({ type: 'pause' });
    await settle();
    expect(actor.getSnapshot().value).toEqual({ working: 'awaitingApproval' });
    approvals[0]?.finish();
    await vi.waitFor(() => expect(toolRuns).toHaveLength(1));
    expect(actor.getSnapshot().status).toBe('active');
    toolRuns[0]?.finish();
    const ended = await output;
    expect(ended).toMatchObject({ ok: false, turns: 1, failure: paused });
    expect(ended.messages.at(-1)).toMatchObject({ role: 'tool', toolCallId: 'c1' });
    expect(modelCalls).toHaveLength(1);
  });

  it('lets a summary under way finish, then stops before the model call it made room for', async () => {
    const modelCalls: ModelCallInput[] = [];
    const summaries: (() => void)[] = [];
    const services: AgentServices = {
      callModel: async (callInput) => {
        modelCalls.push(callInput);
        return reply('', [call('c1')]);
      },
      runTools: async ({ calls }) => calls.map((c) => result(c.id)),
      compactConversation: () =>
        new Promise((resolve) =>
          summaries.push(() => resolve({ summary: 's', usage: zeroUsage(), costUsd: 0 })),
        ),
    };
    const actor = createActor(agentMachine, { input: { ...baseInput, contextTokens: 1, services } });
    actor.start();
    const output = toPromise(actor);
    await vi.waitFor(() => expect(summaries).toHaveLength(1));
    const asked = modelCalls.length;
    actor.send({ type: 'pause' });
    summaries[0]?.();
    const ended = await output;
    // The summary finished and counts; no model call follows it.
    expect(ended).toMatchObject({ ok: false, turns: asked, compactions: 1, failure: { code: 'paused' } });
    expect(modelCalls).toHaveLength(asked);
  });

  it('stops at once, asking nothing, when its task was paused before it started', async () => {
    const { modelCalls, output } = held({ paused: true });
    expect(await output).toMatchObject({ ok: false, turns: 0, failure: { code: 'paused' } });
    expect(modelCalls).toHaveLength(0);
  });
});

describe('agentMachine: told messages', () => {
  it('puts the user turns read before a model call into the conversation ahead of its reply', async () => {
    const told: ChatMessage[] = [{ role: 'user', content: 'Message from ann: use v2' }];
    const inputs: ModelCallInput[] = [];
    const replies = [{ ...reply('', [call('c1')]), told }, reply('done')];
    const services: AgentServices = {
      callModel: async (input) => {
        inputs.push(input);
        const next = replies.shift();
        if (!next) throw new Error('no more replies');
        return next;
      },
      runTools: async ({ calls }) => calls.map((c) => result(c.id)),
      compactConversation: async () => ({ summary: 's', usage: zeroUsage(), costUsd: 0 }),
    };
    const actor = createActor(agentMachine, { input: { ...baseInput, services } });
    const emitted: AgentEmitted[] = [];
    actor.on('*', (event) => emitted.push(event));
    actor.start();
    const output = await toPromise(actor);
    expect(output.messages.map((m) => m.role)).toEqual([
      'system',
      'user',
      'user',
      'assistant',
      'tool',
      'assistant',
    ]);
    expect(output.messages[2]).toEqual(told[0]);
    expect(inputs[1]?.messages.slice(0, 4)).toEqual(output.messages.slice(0, 4));
    // The reply's event carries the reply, not what was told before it.
    expect(emitted.find((e) => e.type === 'llm.response')).not.toHaveProperty('told');
  });
});
