import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type FakeModelServer, startFakeAnthropic, startFakeOpenAI } from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Harness, ofKind, publishTask, startHarness } from './support/harness.ts';

const OPENAI_KEY = 'sk-test-SECRET-openai-1234';
const ANTHROPIC_KEY = 'sk-ant-SECRET-anthropic-5678';

describe('agents on OpenAI, Anthropic and OpenAI-compatible models, through the real SDKs', () => {
  let openai: FakeModelServer;
  let anthropic: FakeModelServer;
  let local: FakeModelServer;
  let dir: string;
  let h: Harness;
  const logLines: string[] = [];

  beforeAll(async () => {
    [openai, anthropic, local] = await Promise.all([
      startFakeOpenAI(),
      startFakeAnthropic(),
      startFakeOpenAI(),
    ]);
    dir = await mkdtemp(join(tmpdir(), 'troupe-providers-'));
    const models = `
models:
  gpt: { provider: openai, model: gpt-5-mini, baseURL: "${openai.baseURL}", maxAttempts: 3, retryDelay: 0.01 }
  gpt-once: { provider: openai, model: gpt-5-mini, baseURL: "${openai.baseURL}", maxAttempts: 2, retryDelay: 0.01 }
  claude: { provider: anthropic, model: claude-sonnet-4-6, baseURL: "${anthropic.baseURL}", maxAttempts: 2, retryDelay: 0.01 }
  llama: { provider: openai-compatible, model: llama3.1, baseURL: "${local.baseURL}" }
  impatient: { provider: openai, model: gpt-5-mini, baseURL: "${openai.baseURL}", timeout: 0.3, maxAttempts: 2, retryDelay: 0.01 }
`;
    const single = (name: string, agent: string) =>
      `version: 1\nname: ${name}\n${models}\nagents:\n${agent}\nflow:\n  - { id: work, kind: agent, agent: worker }\n`;
    const files: Record<string, string> = {
      'oa.yaml': single(
        'oa',
        '  worker: { model: gpt, instructions: Write the files., tools: [write_file, list_files] }',
      ),
      'an.yaml': single(
        'an',
        '  worker: { model: claude, instructions: Write the files., tools: [write_file, list_files] }',
      ),
      'local.yaml': single('local', '  worker: { model: llama, instructions: Answer. }'),
      'st.yaml': single('st', '  worker: { model: gpt, stream: true, instructions: Answer at length. }'),
      'ast.yaml': single(
        'ast',
        '  worker: { model: claude, stream: true, instructions: Write it., tools: [write_file] }',
      ),
      'slow.yaml': single('slow', '  worker: { model: impatient, instructions: Answer. }'),
      'fb.yaml': single('fb', '  worker: { model: gpt-once, fallback: [claude], instructions: Answer. }'),
      'so.yaml': single(
        'so',
        '  worker:\n    model: gpt\n    instructions: Rate it.\n    output: { type: object, properties: { title: { type: string }, score: { type: integer } }, required: [title, score], additionalProperties: false }',
      ),
      'rv.yaml': `version: 1\nname: rv\n${models}\nagents:\n  worker: { model: gpt, instructions: Do it. }\n  judge: { model: claude, instructions: Judge it. }\nflow:\n  - { id: work, kind: agent, agent: worker }\n  - { id: check, kind: review, agent: judge, onReject: work, maxRounds: 2 }\n`,
    };
    for (const [file, text] of Object.entries(files)) await writeFile(join(dir, file), text);
    h = await startHarness(
      Object.keys(files).map((f) => join(dir, f)),
      { env: { OPENAI_API_KEY: OPENAI_KEY, ANTHROPIC_API_KEY: ANTHROPIC_KEY }, logLines },
    );
  });
  afterAll(async () => {
    await h?.stop();
    await Promise.all([openai?.stop(), anthropic?.stop(), local?.stop()]);
    await rm(dir, { recursive: true, force: true });
  });

  it('runs parallel tool calls on OpenAI and sends every result back, with usage and cost from the reply', async () => {
    const before = openai.requests.length;
    openai.enqueue(
      {
        kind: 'message',
        toolCalls: [
          { id: 'call_a', name: 'write_file', arguments: JSON.stringify({ path: 'a.md', content: 'A' }) },
          { id: 'call_b', name: 'write_file', arguments: JSON.stringify({ path: 'b.md', content: 'B' }) },
        ],
        usage: { inputTokens: 1_000, outputTokens: 100, cachedTokens: 200 },
      },
      { kind: 'message', content: 'wrote a.md and b.md', usage: { inputTokens: 1_200, outputTokens: 50 } },
    );
    publishTask(h, 'oa', { id: 'oa-1', goal: 'write two files' });
    const final = await h.finalOf('oa-1');
    expect(final.kind).toBe('task.completed');

    expect(await readFile(join(h.workspaceRoot, 'oa', 'oa-1', 'a.md'), 'utf8')).toBe('A');
    expect(await readFile(join(h.workspaceRoot, 'oa', 'oa-1', 'b.md'), 'utf8')).toBe('B');
    const [first, second] = openai.requests.slice(before);
    expect(first?.headers.authorization).toBe(`Bearer ${OPENAI_KEY}`);
    expect(first?.body.tools.map((t: { function: { name: string } }) => t.function.name)).toEqual([
      'write_file',
      'list_files',
    ]);
    const toolMessages = second?.body.messages.filter((m: { role: string }) => m.role === 'tool');
    expect(toolMessages.map((m: { tool_call_id: string }) => m.tool_call_id)).toEqual(['call_a', 'call_b']);
    expect(toolMessages[0].content).toContain('wrote 1 bytes to a.md');

    // gpt-5-mini: $0.25 / M input, $0.025 / M cached input, $2 / M output.
    const expectedCost = (800 * 0.25 + 200 * 0.025 + 100 * 2 + 1_200 * 0.25 + 50 * 2) / 1e6;
    if (final.kind !== 'task.completed') return;
    expect(final.data.usage).toMatchObject({
      inputTokens: 2_200,
      outputTokens: 150,
      cachedTokens: 200,
      modelCalls: 2,
    });
    expect(final.data.usage.costUsd).toBeCloseTo(expectedCost, 12);
    expect(final.data.usageByAgent.worker?.costUsd).toBeCloseTo(expectedCost, 12);
    const responses = ofKind(h.eventsOf('oa-1'), 'llm.response');
    expect(responses.map((r) => r.data.usage)).toEqual([
      { inputTokens: 1_000, outputTokens: 100, cachedTokens: 200 },
      { inputTokens: 1_200, outputTokens: 50, cachedTokens: 0 },
    ]);
    expect(responses.every((r) => r.data.provider === 'openai' && r.data.model === 'gpt-5-mini')).toBe(true);
  });

  it('runs tool calls on Anthropic as tool_use and tool_result blocks, with the system prompt apart', async () => {
    const before = anthropic.requests.length;
    anthropic.enqueue(
      {
        kind: 'message',
        content: 'Writing both.',
        toolCalls: [
          { id: 'toolu_a', name: 'write_file', arguments: JSON.stringify({ path: 'a.md', content: 'A' }) },
          { id: 'toolu_b', name: 'list_files', arguments: '{}' },
        ],
        usage: { inputTokens: 500, outputTokens: 40, cachedTokens: 100 },
      },
      { kind: 'message', content: 'done', usage: { inputTokens: 600, outputTokens: 10 } },
    );
    publishTask(h, 'an', { id: 'an-1', goal: 'write a file' });
    const final = await h.finalOf('an-1');
    expect(final.kind).toBe('task.completed');
    const [first, second] = anthropic.requests.slice(before);
    // Sent as one text block marked for the prompt cache (issue 35).
    expect(first?.body.system).toEqual([
      expect.objectContaining({ type: 'text', text: expect.stringContaining('Write the files.') }),
    ]);
    expect(first?.body.messages[0].role).toBe('user');
    const last = second?.body.messages.at(-1);
    expect(last.role).toBe('user');
    expect(last.content.map((b: { type: string; tool_use_id: string }) => [b.type, b.tool_use_id])).toEqual([
      ['tool_result', 'toolu_a'],
      ['tool_result', 'toolu_b'],
    ]);
    if (final.kind !== 'task.completed') return;
    // Anthropic reports cache reads apart from input; Troupe counts them in.
    expect(final.data.usage).toMatchObject({ inputTokens: 1_200, outputTokens: 50, cachedTokens: 100 });
    expect(final.data.usage.costUsd).toBeCloseTo((1_100 * 3 + 100 * 0.3 + 50 * 15) / 1e6, 12);
  });

  it('talks to an OpenAI-compatible server at its baseURL without a key', async () => {
    local.enqueue({ kind: 'message', content: 'hello from llama' });
    publishTask(h, 'local', { id: 'local-1', goal: 'say hello' });
    const final = await h.finalOf('local-1');
    expect(final.kind === 'task.completed' && final.data.output).toBe('hello from llama');
    expect(local.requests.at(-1)?.body.model).toBe('llama3.1');
    expect(local.requests.at(-1)?.headers.authorization).not.toContain('SECRET');
  });

  it('streams: batched llm.delta events add up to a reply identical to the non-streamed one', async () => {
    const text = 'The quick brown fox jumps over the lazy dog. '.repeat(8).trim();
    openai.enqueue({ kind: 'message', content: text });
    publishTask(h, 'st', { id: 'st-1', goal: 'stream it' });
    publishTask(h, 'local', { id: 'st-plain', goal: 'no stream' });
    local.enqueue({ kind: 'message', content: text });
    const [streamed, plain] = await Promise.all([h.finalOf('st-1'), h.finalOf('st-plain')]);
    expect(streamed.kind === 'task.completed' && streamed.data.output).toBe(text);
    expect(plain.kind === 'task.completed' && plain.data.output).toBe(text);
    expect(openai.requests.some((r) => r.body.stream === true && r.body.stream_options?.include_usage)).toBe(
      true,
    );

    const deltas = ofKind(h.eventsOf('st-1'), 'llm.delta');
    expect(deltas.map((d) => d.data.text).join('')).toBe(text);
    expect(deltas.map((d) => d.data.seq)).toEqual(deltas.map((_, i) => i));
    // The fake streams 5-character pieces; batching sends far fewer messages than that.
    expect(deltas.length).toBeLessThan(text.length / 5 / 4);
    expect(ofKind(h.eventsOf('st-plain'), 'llm.delta')).toHaveLength(0);
  });

  it('streams Anthropic tool calls: their input arrives in pieces and runs once whole', async () => {
    anthropic.enqueue(
      {
        kind: 'message',
        content: 'Writing the note now.',
        toolCalls: [
          {
            id: 'toolu_s',
            name: 'write_file',
            arguments: JSON.stringify({ path: 'n.md', content: 'streamed' }),
          },
        ],
      },
      { kind: 'message', content: 'Wrote n.md.' },
    );
    publishTask(h, 'ast', { id: 'ast-1', goal: 'write a note' });
    const final = await h.finalOf('ast-1');
    expect(final.kind === 'task.completed' && final.data.output).toBe('Wrote n.md.');
    expect(await readFile(join(h.workspaceRoot, 'ast', 'ast-1', 'n.md'), 'utf8')).toBe('streamed');
    const deltas = ofKind(h.eventsOf('ast-1'), 'llm.delta');
    const args = deltas
      .flatMap((d) => d.data.toolCalls ?? [])
      .map((c) => c.arguments)
      .join('');
    expect(JSON.parse(args)).toEqual({ path: 'n.md', content: 'streamed' });
    expect(deltas.map((d) => d.data.text).join('')).toBe('Writing the note now.Wrote n.md.');
  });

  it('sends malformed tool arguments back to the model as a tool error, and the agent recovers', async () => {
    const before = openai.requests.length;
    openai.enqueue(
      {
        kind: 'message',
        toolCalls: [{ id: 'call_bad', name: 'write_file', arguments: '{"path": "x.md", "content": ' }],
      },
      { kind: 'message', toolCalls: [{ id: 'call_nope', name: 'delete_everything', arguments: '{}' }] },
      { kind: 'message', content: 'gave up on the file' },
    );
    publishTask(h, 'oa', { id: 'bad-args', goal: 'try' });
    const final = await h.finalOf('bad-args');
    expect(final.kind).toBe('task.completed');
    const results = ofKind(h.eventsOf('bad-args'), 'tool.result');
    expect(results.map((r) => [r.data.ok, r.data.error?.code])).toEqual([
      [false, 'invalid_arguments'],
      [false, 'unknown_tool'],
    ]);
    const replies = openai.requests
      .slice(before + 1)
      .map((r) => r.body.messages.filter((m: { role: string }) => m.role === 'tool').at(-1).content);
    expect(replies[0]).toContain('not valid JSON');
    expect(replies[1]).toContain('delete_everything');
  });

  it('retries a call that times out, then reports the timeout as an event', async () => {
    const before = openai.requests.length;
    openai.enqueue({ kind: 'hang' }, { kind: 'message', content: 'in time' });
    publishTask(h, 'slow', { id: 'slow-1', goal: 'be quick' });
    const final = await h.finalOf('slow-1');
    expect(final.kind === 'task.completed' && final.data.output).toBe('in time');
    expect(openai.requests.length - before).toBe(2);
    expect(ofKind(h.eventsOf('slow-1'), 'llm.retry').map((r) => r.data.code)).toEqual(['timeout']);
  });

  it('retries a 429 (honouring retry-after) and a 500, reporting each retry, then succeeds', async () => {
    const before = openai.requests.length;
    openai.enqueue(
      { kind: 'error', status: 429, message: 'Rate limit reached', headers: { 'retry-after': '0' } },
      { kind: 'error', status: 500, message: 'The server had an error' },
      { kind: 'message', content: 'finally' },
    );
    publishTask(h, 'oa', { id: 'retry-1', goal: 'survive faults' });
    const final = await h.finalOf('retry-1');
    expect(final.kind === 'task.completed' && final.data.output).toBe('finally');
    expect(openai.requests.length - before).toBe(3);
    const retries = ofKind(h.eventsOf('retry-1'), 'llm.retry');
    expect(retries.map((r) => [r.data.attempt, r.data.code])).toEqual([
      [1, 'rate_limited'],
      [2, 'server_error'],
    ]);
    expect(retries[0]?.data.delayMs).toBe(0);
    expect(retries[0]?.data.message).toContain('Rate limit reached');
  });

  it('fails at once on a 401 with the provider’s message, without retrying', async () => {
    const before = openai.requests.length;
    openai.enqueue({ kind: 'error', status: 401, message: 'Incorrect API key provided' });
    publishTask(h, 'oa', { id: 'auth-1', goal: 'no key' });
    const final = await h.finalOf('auth-1');
    expect(final.kind).toBe('task.failed');
    expect(openai.requests.length - before).toBe(1);
    expect(ofKind(h.eventsOf('auth-1'), 'llm.retry')).toHaveLength(0);
    const error = ofKind(h.eventsOf('auth-1'), 'llm.error')[0];
    expect(error?.data.code).toBe('auth');
    expect(final.kind === 'task.failed' && final.data.message).toContain('Incorrect API key provided');
  });

  it('falls back to the next model when the primary keeps failing', async () => {
    openai.enqueue({ kind: 'error', status: 500 }, { kind: 'error', status: 503 });
    anthropic.enqueue({ kind: 'message', content: 'answered by claude' });
    publishTask(h, 'fb', { id: 'fb-1', goal: 'answer somehow' });
    const final = await h.finalOf('fb-1');
    expect(final.kind === 'task.completed' && final.data.output).toBe('answered by claude');
    const fallback = ofKind(h.eventsOf('fb-1'), 'llm.fallback');
    expect(fallback.map((f) => [f.data.from, f.data.to])).toEqual([
      ['openai:gpt-5-mini', 'anthropic:claude-sonnet-4-6'],
    ]);
    expect(ofKind(h.eventsOf('fb-1'), 'llm.retry')).toHaveLength(1);
    const response = ofKind(h.eventsOf('fb-1'), 'llm.response')[0];
    expect(response?.data).toMatchObject({ provider: 'anthropic', model: 'claude-sonnet-4-6' });
    // The envelope names the model that answered, as `troupe tail` prints it.
    expect(response?.from).toBe('anthropic:claude-sonnet-4-6');
  });

  it('asks OpenAI for structured output natively, and repairs an invalid reply once', async () => {
    const before = openai.requests.length;
    openai.enqueue(
      { kind: 'message', content: 'It is great, 9/10.' },
      { kind: 'message', content: '{"title":"great","score":9}' },
    );
    publishTask(h, 'so', { id: 'so-1', goal: 'rate it' });
    const final = await h.finalOf('so-1');
    expect(final.kind === 'task.completed' && JSON.parse(final.data.output)).toEqual({
      title: 'great',
      score: 9,
    });
    const [first, second] = openai.requests.slice(before);
    expect(first?.body.response_format).toMatchObject({
      type: 'json_schema',
      json_schema: { name: 'worker_output' },
    });
    expect(first?.body.response_format.json_schema.schema.required).toEqual(['title', 'score']);
    const repair = second?.body.messages.at(-1);
    expect(repair.role).toBe('user');
    expect(repair.content).toContain('did not match the required output');
  });

  it('gets a reviewer’s verdict from Anthropic through a forced tool', async () => {
    const before = anthropic.requests.length;
    openai.enqueue({ kind: 'message', content: 'work done' });
    anthropic.enqueue({
      kind: 'message',
      toolCalls: [{ name: 'verdict', arguments: '{"decision":"approve","feedback":"good work"}' }],
    });
    publishTask(h, 'rv', { id: 'rv-1', goal: 'do and check' });
    const final = await h.finalOf('rv-1');
    expect(final.kind).toBe('task.completed');
    const review = ofKind(h.eventsOf('rv-1'), 'step.completed').find((e) => e.data.step === 'check');
    expect(review?.data.verdict).toEqual({ decision: 'approve', feedback: 'good work' });
    const request = anthropic.requests[before];
    expect(request?.body.tool_choice).toEqual({ type: 'tool', name: 'verdict' });
    expect(request?.body.tools.map((t: { name: string }) => t.name)).toEqual(['verdict']);
  });

  it('never writes an API key into a log line or an event', () => {
    expect(logLines.length).toBeGreaterThan(50);
    expect(h.events.length).toBeGreaterThan(50);
    const everything = [
      ...logLines,
      ...h.events.map((e) => JSON.stringify(e)),
      ...h.invalid.map((e) => JSON.stringify(e)),
    ];
    expect(everything.filter((line) => line.includes('SECRET'))).toEqual([]);
    // The keys were really used: the servers saw them.
    expect(openai.requests.some((r) => r.headers.authorization === `Bearer ${OPENAI_KEY}`)).toBe(true);
    expect(anthropic.requests.some((r) => JSON.stringify(r.headers).includes(ANTHROPIC_KEY))).toBe(true);
  });
});
