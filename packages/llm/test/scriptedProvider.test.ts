import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  type CallContext,
  type ChatMessage,
  loadScript,
  ModelError,
  type ModelRequest,
  parseScript,
  Script,
  ScriptedProvider,
} from '../src/index.ts';

const context = (overrides: Partial<CallContext> = {}): CallContext => ({
  taskId: 'task-1',
  pipeline: 'demo',
  agent: 'planner',
  stepId: 'task-1.plan.1',
  ...overrides,
});

const request = (overrides: Partial<CallContext> = {}, extra: Partial<ModelRequest> = {}): ModelRequest => ({
  messages: [{ role: 'user', content: 'go' }],
  tools: [],
  context: context(overrides),
  ...extra,
});

/** Builds a provider from the plain script shape, applying the schema's defaults as a loaded script would. */
const provider = (script: unknown) => new ScriptedProvider(Script.parse(script));

/** The ModelError a call rejects with; fails the test if it resolves or rejects with something else. */
async function modelError(call: Promise<unknown>): Promise<ModelError> {
  const error = await call.then(
    (value) => {
      throw new Error(`expected a ModelError, got ${JSON.stringify(value)}`);
    },
    (reason: unknown) => reason,
  );
  expect(error).toBeInstanceOf(ModelError);
  return error as ModelError;
}

describe('ScriptedProvider: replies', () => {
  it('names itself and its model', () => {
    expect(provider({ agents: { planner: [{ content: 'x' }] } })).toMatchObject({
      provider: 'scripted',
      model: 'scripted',
    });
    expect(new ScriptedProvider({ agents: {} }, 'fake-1').model).toBe('fake-1');
  });

  it('plays one agent its replies in order', async () => {
    const model = provider({ agents: { planner: [{ content: 'first' }, { content: 'second' }] } });
    const first = await model.complete(request());
    const second = await model.complete(request());
    expect([first.content, second.content]).toEqual(['first', 'second']);
    expect(first).toMatchObject({ finishReason: 'stop', toolCalls: [], model: 'scripted' });
  });

  it('keeps a separate place for each task, even when their calls interleave', async () => {
    const model = provider({
      agents: { planner: [{ content: 'one' }, { content: 'two' }, { content: 'three' }] },
    });
    const a = () => model.complete(request({ taskId: 'task-a' })).then((r) => r.content);
    const b = () => model.complete(request({ taskId: 'task-b' })).then((r) => r.content);
    expect([await a(), await b(), await b(), await a(), await b(), await a()]).toEqual([
      'one',
      'one',
      'two',
      'two',
      'three',
      'three',
    ]);
  });

  it('plays the reply the call is numbered for, whatever was played before (a step resumed elsewhere)', async () => {
    const model = provider({
      agents: { planner: [{ content: 'one' }, { content: 'two' }, { content: 'three' }] },
    });
    const numbered = (call: number) => model.complete(request({ call })).then((r) => r.content);
    expect([await numbered(2), await numbered(0), await numbered(2), await numbered(1)]).toEqual([
      'three',
      'one',
      'three',
      'two',
    ]);
    const beyond = await modelError(model.complete(request({ call: 3 })));
    expect(beyond.message).toMatch(/reply 4 was requested/);
  });

  it('keeps a separate place for each agent of one task', async () => {
    const model = provider({
      agents: {
        planner: [{ content: 'p1' }, { content: 'p2' }],
        coder: [{ content: 'c1' }, { content: 'c2' }],
      },
    });
    const planner = () => model.complete(request({ agent: 'planner' })).then((r) => r.content);
    const coder = () => model.complete(request({ agent: 'coder' })).then((r) => r.content);
    expect([await planner(), await coder(), await coder(), await planner()]).toEqual([
      'p1',
      'c1',
      'c2',
      'p2',
    ]);
  });

  it('carries its place across the steps of one task', async () => {
    const model = provider({ agents: { planner: [{ content: 'round 1' }, { content: 'round 2' }] } });
    await model.complete(request({ stepId: 'task-1.plan.1' }));
    const next = await model.complete(request({ stepId: 'task-1.plan.2' }));
    expect(next.content).toBe('round 2');
  });

  it('sends object arguments as JSON and string arguments as they are', async () => {
    const model = provider({
      agents: {
        planner: [
          {
            toolCalls: [
              { name: 'write_file', arguments: { path: 'hello.md', content: '# Hi' } },
              { id: 'custom-id', name: 'read_file', arguments: '{"path": "hello.md"' },
              { name: 'list_files' },
            ],
          },
        ],
      },
    });
    const response = await model.complete(request({ stepId: 'step-9' }));
    expect(response.finishReason).toBe('tool_calls');
    expect(response.content).toBe('');
    expect(response.toolCalls).toEqual([
      { id: 'call_step-9.0.0', name: 'write_file', arguments: '{"path":"hello.md","content":"# Hi"}' },
      { id: 'custom-id', name: 'read_file', arguments: '{"path": "hello.md"' },
      { id: 'call_step-9.0.2', name: 'list_files', arguments: '{}' },
    ]);
    expect(JSON.parse(response.toolCalls[0]?.arguments ?? '')).toEqual({ path: 'hello.md', content: '# Hi' });
  });

  it('numbers generated call ids by the turn they come from', async () => {
    const model = provider({
      agents: { planner: [{ toolCalls: [{ name: 'a' }] }, { toolCalls: [{ name: 'b' }] }] },
    });
    await model.complete(request({ stepId: 's' }));
    const second = await model.complete(request({ stepId: 's' }));
    expect(second.toolCalls[0]?.id).toBe('call_s.1.0');
  });

  it('returns text and tool calls together when a turn has both', async () => {
    const model = provider({
      agents: { planner: [{ content: 'writing', toolCalls: [{ name: 'write_file' }] }] },
    });
    const response = await model.complete(request());
    expect(response.content).toBe('writing');
    expect(response.toolCalls.map((c) => c.name)).toEqual(['write_file']);
    expect(response.finishReason).toBe('tool_calls');
  });
});

describe('ScriptedProvider: usage', () => {
  it('reports scripted usage as given, with no cached tokens', async () => {
    const model = provider({
      agents: { planner: [{ content: 'x', usage: { inputTokens: 321, outputTokens: 7 } }] },
    });
    expect((await model.complete(request())).usage).toEqual({
      inputTokens: 321,
      outputTokens: 7,
      cachedTokens: 0,
    });
  });

  it('estimates usage at four characters a token, rounding up, when the script gives none', async () => {
    const messages: ChatMessage[] = [
      { role: 'system', content: 'a'.repeat(10) },
      { role: 'user', content: 'b'.repeat(7) },
    ];
    const model = provider({ agents: { planner: [{ content: 'c'.repeat(9) }] } });
    const response = await model.complete(request({}, { messages }));
    // 17 input characters → 5 tokens; 9 output characters → 3 tokens.
    expect(response.usage).toEqual({ inputTokens: 5, outputTokens: 3, cachedTokens: 0 });
  });

  it('counts tool names and arguments as output when estimating', async () => {
    const model = provider({
      agents: { planner: [{ toolCalls: [{ name: 'abcd', arguments: 'x'.repeat(12) }] }] },
    });
    const response = await model.complete(request({}, { messages: [] }));
    expect(response.usage).toEqual({ inputTokens: 0, outputTokens: 4, cachedTokens: 0 });
  });
});

describe('ScriptedProvider: failures', () => {
  it('raises a scripted error as scripted_failure with the scripted message, and moves on', async () => {
    const model = provider({ agents: { planner: [{ error: 'upstream 503' }, { content: 'recovered' }] } });
    const error = await modelError(model.complete(request()));
    expect(error.code).toBe('scripted_failure');
    expect(error.message).toBe('upstream 503');
    expect(error.name).toBe('ModelError');
    expect(error.retryable).toBe(false);
    expect((await model.complete(request())).content).toBe('recovered');
  });

  it('raises script_exhausted naming the agent, the count and the task once the replies run out', async () => {
    const model = provider({ agents: { planner: [{ content: 'a' }, { content: 'b' }] } });
    await model.complete(request());
    await model.complete(request());
    const error = await modelError(model.complete(request()));
    expect(error.code).toBe('script_exhausted');
    expect(error.message).toContain('agent "planner" has 2 scripted replies; reply 3 was requested');
    expect(error.message).toContain('task-1');
  });

  it('does not let one task exhaust the script for another', async () => {
    const model = provider({ agents: { planner: [{ content: 'only' }] } });
    await model.complete(request({ taskId: 'task-a' }));
    expect((await modelError(model.complete(request({ taskId: 'task-a' })))).code).toBe('script_exhausted');
    expect((await model.complete(request({ taskId: 'task-b' }))).content).toBe('only');
  });

  it('raises config for an agent the script does not know, naming it', async () => {
    const model = provider({ agents: { planner: [{ content: 'x' }] } });
    const error = await modelError(model.complete(request({ agent: 'reviewer' })));
    expect(error.code).toBe('config');
    expect(error.message).toContain('"reviewer"');
  });
});

describe('ScriptedProvider: delays', () => {
  it('waits delayMs before replying', async () => {
    const model = provider({ agents: { planner: [{ content: 'slow', delayMs: 40 }] } });
    const started = performance.now();
    const response = await model.complete(request());
    expect(response.content).toBe('slow');
    expect(performance.now() - started).toBeGreaterThanOrEqual(35);
  });

  it('stops waiting with an aborted error when the signal fires', async () => {
    const model = provider({ agents: { planner: [{ content: 'slow', delayMs: 60_000 }] } });
    const controller = new AbortController();
    const call = model.complete(request({}, { signal: controller.signal }));
    setTimeout(() => controller.abort(), 10);
    const started = performance.now();
    const error = await modelError(call);
    expect(error.code).toBe('aborted');
    expect(performance.now() - started).toBeLessThan(5_000);
  });

  it('refuses at once when the signal is already aborted', async () => {
    const model = provider({ agents: { planner: [{ content: 'slow', delayMs: 60_000 }] } });
    const error = await modelError(model.complete(request({}, { signal: AbortSignal.abort() })));
    expect(error.code).toBe('aborted');
  });

  it('delays a scripted error too, and an abort wins over it', async () => {
    const model = provider({ agents: { planner: [{ error: 'boom', delayMs: 60_000 }] } });
    const controller = new AbortController();
    const call = model.complete(request({}, { signal: controller.signal }));
    controller.abort();
    expect((await modelError(call)).code).toBe('aborted');
  });
});

describe('parseScript', () => {
  /** The config error parseScript throws for a text. */
  function configError(text: string, source?: string): ModelError {
    try {
      parseScript(text, source);
    } catch (error) {
      expect(error).toBeInstanceOf(ModelError);
      expect((error as ModelError).code).toBe('config');
      return error as ModelError;
    }
    throw new Error('expected parseScript to throw');
  }

  it('reads YAML with defaults filled in', () => {
    const script = parseScript(
      [
        'agents:',
        '  planner:',
        '    - content: Plan ready',
        '  coder:',
        '    - toolCalls:',
        '        - name: write_file',
        '          arguments: { path: hello.md, content: hi }',
        '    - error: rate limited',
        '      delayMs: 5',
      ].join('\n'),
    );
    expect(script).toEqual({
      agents: {
        planner: [{ content: 'Plan ready', toolCalls: [] }],
        coder: [
          {
            content: '',
            toolCalls: [{ name: 'write_file', arguments: { path: 'hello.md', content: 'hi' } }],
          },
          { content: '', toolCalls: [], error: 'rate limited', delayMs: 5 },
        ],
      },
    });
  });

  it('reads JSON, since JSON is YAML', () => {
    expect(parseScript('{"agents": {"planner": [{"content": "x"}]}}').agents.planner).toEqual([
      { content: 'x', toolCalls: [] },
    ]);
  });

  it('names the path of a bad turn', () => {
    const error = configError('agents:\n  planner:\n    - content: 42\n', 'demo.yaml');
    expect(error.message).toMatch(/^demo\.yaml: invalid script: /);
    expect(error.message).toContain('agents.planner.0.content:');
  });

  it('refuses a turn with nothing in it, at its path', () => {
    const error = configError('agents:\n  planner:\n    - content: ok\n    - {}\n');
    expect(error.message).toContain('agents.planner.1: a turn needs content, toolCalls or error');
  });

  it('refuses a turn with empty content and no tool calls', () => {
    const error = configError('agents:\n  planner:\n    - content: ""\n      toolCalls: []\n');
    expect(error.message).toContain('agents.planner.0: a turn needs content, toolCalls or error');
  });

  it('refuses unknown keys in a turn, such as a typo', () => {
    const error = configError('agents:\n  planner:\n    - contnet: hi\n');
    expect(error.message).toContain('agents.planner.0');
  });

  it('refuses an agent with no replies', () => {
    expect(configError('agents:\n  planner: []\n').message).toContain('agents.planner:');
  });

  it('refuses a negative or fractional delay', () => {
    expect(configError('agents:\n  planner:\n    - content: x\n      delayMs: -1\n').message).toContain(
      'agents.planner.0.delayMs',
    );
    expect(configError('agents:\n  planner:\n    - content: x\n      delayMs: 1.5\n').message).toContain(
      'agents.planner.0.delayMs',
    );
  });

  it('says "(root)" when the document itself is wrong', () => {
    expect(configError('- just a list\n').message).toBe(`script: invalid script: (root): ${rootMessage()}`);
  });

  it('refuses text that is not YAML, naming the source', () => {
    expect(configError('agents: [unclosed', 'bad.yaml').message).toMatch(/^bad\.yaml: not valid YAML: /);
  });
});

/** zod's message for a non-object where an object was expected, read from zod so the test does not pin its wording. */
function rootMessage(): string {
  const result = Script.safeParse(['just a list']);
  return result.error?.issues[0]?.message ?? '';
}

describe('loadScript', () => {
  it('reads a script file and names the file in errors', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'troupe-llm-'));
    try {
      const good = path.join(dir, 'good.yaml');
      await writeFile(good, 'agents:\n  planner:\n    - content: hello\n');
      expect((await loadScript(good)).agents.planner?.[0]?.content).toBe('hello');

      const bad = path.join(dir, 'bad.yaml');
      await writeFile(bad, 'agents:\n  planner:\n    - {}\n');
      const error = await modelError(loadScript(bad));
      expect(error.code).toBe('config');
      expect(error.message.startsWith(`${bad}: invalid script: agents.planner.0:`)).toBe(true);

      const missing = await modelError(loadScript(path.join(dir, 'missing.yaml')));
      expect(missing.code).toBe('config');
      expect(missing.message).toContain('cannot read script');
      expect(missing.cause).toBeInstanceOf(Error);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
