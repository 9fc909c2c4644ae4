import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { EventData, EventKind, EventOf, TroupeEvent } from '@troupe/protocol';
import { EventFactory, type JournalRecord, preview, StepJournal } from '@troupe/runtime';
import { MemoryKv } from '@troupe/testkit';
import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { builtinTools } from '../src/config/builtinTools.ts';
import { loadPipeline } from '../src/config/loadPipeline.ts';
import { Recording } from '../src/replay/recording.ts';
import { factsOf, firstDivergence, recordedTools, replayTask } from '../src/replay/replayTask.ts';

const factory = new EventFactory({ now: () => Date.UTC(2026, 0, 1) });
const scope = { pipeline: 'demo', taskId: 't1', traceparent: '' };
const make = <K extends EventKind>(kind: K, data: z.input<(typeof EventData)[K]>): TroupeEvent =>
  factory.make(kind, scope, data);
const ref = { agent: 'coder', stepId: 't1.code.1' };
/** The first turn's reply, its text and calls as given. */
const firstReply = (
  finishReason: string,
  content: string,
  toolCalls: { id: string; name: string }[] = [],
): TroupeEvent =>
  make('llm.response', {
    ...ref,
    turn: 1,
    provider: 'openai',
    model: 'gpt-x',
    usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0 },
    costUsd: 0,
    finishReason,
    content,
    toolCalls,
    durationMs: 1,
  });

const recorded: TroupeEvent[] = [
  make('task.accepted', { goal: 'write hello.md' }),
  make('step.started', { step: 'code', agent: 'coder', round: 1, stepId: 't1.code.1' }),
  firstReply('tool_calls', '', [{ id: 'c1', name: 'write_file' }]),
  make('tool.call', {
    ...ref,
    turn: 1,
    index: 0,
    callId: 'c1',
    tool: 'write_file',
    arguments: '{"path":"hello.md"}',
  }),
  make('tool.result', {
    ...ref,
    turn: 1,
    index: 0,
    callId: 'c1',
    tool: 'write_file',
    ok: true,
    decision: 'allow',
    output: 'wrote',
    durationMs: 1,
  }),
  make('llm.error', {
    ...ref,
    turn: 2,
    provider: 'openai',
    model: 'gpt-x',
    code: 'rate_limited',
    message: '429',
  }),
];

describe('Recording', () => {
  it('gives each turn of a step its recorded reply, tool calls with their arguments, or its error', async () => {
    const recording = new Recording('t1', recorded);
    const model = recording.modelFor('coder', 'openai', 'gpt-x');
    const request = {
      messages: [],
      tools: [],
      context: { taskId: 't1', pipeline: 'demo', agent: 'coder', stepId: 't1.code.1' },
    };
    expect(await model.complete(request)).toMatchObject({
      finishReason: 'tool_calls',
      toolCalls: [{ id: 'c1', name: 'write_file', arguments: '{"path":"hello.md"}' }],
    });
    await expect(model.complete(request)).rejects.toMatchObject({ code: 'rate_limited', message: '429' });
    await expect(model.complete(request)).rejects.toThrow(/made no model call at step t1\.code\.1, turn 3/);
  });
});

describe('Recording.restore', () => {
  const long = 'y'.repeat(5_000);
  const cut = firstReply('stop', preview(long));
  const journaled = (content: string, toolCalls: { id: string; name: string; arguments: string }[] = []) => ({
    entry: async (key: string) =>
      key === 't1.code.1.1.model'
        ? ({
            kind: 'model.reply',
            conversation: 'digest',
            reply: { ...(cut.data as object), content, toolCalls },
            recordedAt: '2026-01-01T00:00:00.000Z',
          } as never)
        : undefined,
  });
  const request = {
    messages: [],
    tools: [],
    context: { taskId: 't1', pipeline: 'demo', agent: 'coder', stepId: 't1.code.1' },
  };

  it("takes the journal's whole reply for one an event kept in part", async () => {
    const recording = new Recording('t1', [cut]);
    expect(recording.truncated).toEqual(['t1.code.1 turn 1']);
    await recording.restore(journaled(long));
    expect(recording.truncated).toEqual([]);
    expect((await recording.modelFor('coder', 'openai', 'gpt-x').complete(request)).content).toBe(long);
  });

  it('leaves the cut reply when the journal holds another one', async () => {
    for (const other of [
      journaled('z'.repeat(5_000)),
      journaled(long, [{ id: 'c1', name: 'x', arguments: '{}' }]),
    ]) {
      const recording = new Recording('t1', [cut]);
      await recording.restore(other);
      expect(recording.truncated).toEqual(['t1.code.1 turn 1']);
      expect((await recording.modelFor('coder', 'openai', 'gpt-x').complete(request)).content).toBe(
        cut.kind === 'llm.response' ? cut.data.content : '',
      );
    }
  });

  it('leaves the cut reply when a newer host wrote the record in a kind this one does not know', async () => {
    // What `troupe replay` reads: the step journal. Its read of a newer host's record throws (a step must not go
    // on without it), but a replay only loses the whole text, as when the journal has none.
    const kv = new MemoryKv<JournalRecord>();
    await kv.put('t1.code.1.1.model', { kind: 'model.plan', recordedAt: '2027-01-01T00:00:00.000Z' });
    const recording = new Recording('t1', [cut]);
    await recording.restore(new StepJournal(kv));
    expect(recording.truncated).toEqual(['t1.code.1 turn 1']);
    expect((await recording.modelFor('coder', 'openai', 'gpt-x').complete(request)).content).toBe(
      cut.kind === 'llm.response' ? cut.data.content : '',
    );
  });
});

describe('factsOf and firstDivergence', () => {
  it('reads the path, the tool calls and their outcomes, and finds the first fact that differs', () => {
    const facts = factsOf(recorded);
    expect(facts).toEqual([
      { kind: 'step', step: 'code', agent: 'coder', round: 1 },
      { kind: 'tool', step: 'code', turn: 1, index: 0, tool: 'write_file', arguments: '{"path":"hello.md"}' },
      { kind: 'tool result', step: 'code', turn: 1, index: 0, decision: 'allow', ok: true },
    ]);
    expect(firstDivergence(facts, facts)).toBeUndefined();
    const denied = [...facts.slice(0, 2), { ...(facts[2] as object), decision: 'deny', ok: false } as never];
    expect(firstDivergence(facts, denied)).toEqual({ at: 2, recorded: facts[2], replayed: denied[2] });
    expect(firstDivergence(facts, facts.slice(0, 1))).toEqual({
      at: 1,
      recorded: facts[1],
      replayed: undefined,
    });
  });

  it('counts a fact published again (same event id) once', () => {
    expect(factsOf([...recorded, ...recorded])).toHaveLength(3);
  });

  it("keeps a step run's last end: a step asked again after a crash may have ended otherwise before", () => {
    const ended = (verdict: 'approve' | 'reject') =>
      make('step.completed', {
        ...ref,
        step: 'code',
        round: 1,
        ok: true,
        output: verdict,
        verdict: { decision: verdict, feedback: '' },
        usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0, costUsd: 0, modelCalls: 1 },
        turns: 1,
        durationMs: 1,
      });
    const facts = factsOf([...recorded, ended('reject'), ended('approve'), ended('approve')]);
    expect(facts.filter((fact) => fact.kind === 'step end')).toEqual([
      { kind: 'step end', step: 'code', ok: true, verdict: 'approve' },
    ]);
    expect(facts).toHaveLength(4);
  });
});

describe('recorded tools (--no-tools)', () => {
  it('answer with the recorded result of the same call id, running nothing, and fail as the recorded call did', async () => {
    const failed = make('tool.result', {
      ...ref,
      turn: 3,
      index: 0,
      callId: 'c9',
      tool: 'write_file',
      ok: false,
      decision: 'allow',
      output: 'no such directory',
      error: { code: 'not_found', message: 'no such directory' },
      durationMs: 1,
    });
    const recording = new Recording('t1', [...recorded, failed]);
    const config = { agents: { coder: { tools: ['write_file'] } } } as never;
    const tool = recordedTools(recording, config).get('write_file');
    const workspace = await mkdtemp(join(tmpdir(), 'troupe-recorded-'));
    const ctx = { workspace, taskId: 't1', agent: 'coder', signal: new AbortController().signal };
    try {
      expect(await tool?.run({ path: 'hello.md', content: 'x' }, { ...ctx, callId: 'c1' })).toBe('wrote');
      expect(await readdir(workspace)).toEqual([]);
      await expect(
        tool?.run({ path: 'a/b.md', content: 'x' }, { ...ctx, callId: 'c9' }),
      ).rejects.toMatchObject({
        code: 'not_found',
      });
      await expect(tool?.run({ path: 'c.md', content: 'x' }, { ...ctx, callId: 'c404' })).rejects.toThrow(
        /made no write_file call c404/,
      );
    } finally {
      await rm(workspace, { recursive: true, force: true });
    }
  });
});

describe('replaying a task that was told something', () => {
  const usage = { inputTokens: 1, outputTokens: 1, cachedTokens: 0, costUsd: 0, modelCalls: 1 };
  const work = { agent: 'worker', stepId: 't1.work.1' };
  const response = (turn: number, content: string, toolCalls: { id: string; name: string }[] = []) =>
    make('llm.response', {
      ...work,
      turn,
      provider: 'scripted',
      model: 'scripted',
      usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0 },
      costUsd: 0,
      finishReason: toolCalls.length > 0 ? 'tool_calls' : 'stop',
      content,
      toolCalls,
      durationMs: 1,
    });
  /** A run of one step whose agent read a person's message before its second of three model calls, as recorded. */
  const told: TroupeEvent[] = [
    make('task.accepted', { goal: 'write notes.md' }),
    make('step.started', { step: 'work', agent: 'worker', round: 1, stepId: 't1.work.1' }),
    response(1, '', [{ id: 'c1', name: 'write_file' }]),
    make('tool.call', {
      ...work,
      turn: 1,
      index: 0,
      callId: 'c1',
      tool: 'write_file',
      arguments: '{"path":"notes.md","content":"v1"}',
    }),
    make('task.told', { messageId: 'm1', text: 'use the v2 API', by: 'ann' }),
    make('tool.result', {
      ...work,
      turn: 1,
      index: 0,
      callId: 'c1',
      tool: 'write_file',
      ok: true,
      decision: 'allow',
      output: 'wrote',
      durationMs: 1,
    }),
    make('agent.told', { ...work, turn: 2, messageIds: ['m1'] }),
    response(2, '', [{ id: 'c2', name: 'write_file' }]),
    make('tool.call', {
      ...work,
      turn: 2,
      index: 0,
      callId: 'c2',
      tool: 'write_file',
      arguments: '{"path":"notes.md","content":"v2"}',
    }),
    make('tool.result', {
      ...work,
      turn: 2,
      index: 0,
      callId: 'c2',
      tool: 'write_file',
      ok: true,
      decision: 'allow',
      output: 'wrote',
      durationMs: 1,
    }),
    response(3, 'wrote notes.md for v2'),
    make('step.completed', {
      step: 'work',
      agent: 'worker',
      round: 1,
      stepId: 't1.work.1',
      ok: true,
      output: 'wrote notes.md for v2',
      usage,
      turns: 3,
      durationMs: 1,
    }),
    make('task.completed', {
      output: 'wrote notes.md for v2',
      rounds: 1,
      usage,
      usageByAgent: {},
      durationMs: 1,
    }),
  ];

  async function pipeline() {
    const dir = await mkdtemp(join(tmpdir(), 'troupe-replay-told-'));
    await writeFile(
      join(dir, 'script.json'),
      JSON.stringify({ agents: { worker: [{ content: 'unused' }] } }),
    );
    await writeFile(
      join(dir, 'demo.yaml'),
      `version: 1
name: demo
models: { scripted: { provider: scripted, script: ./script.json } }
defaults: { model: scripted }
agents:
  worker: { instructions: Write notes., tools: [write_file] }
flow:
  - { id: work, kind: agent, agent: worker }
`,
    );
    return { dir, loaded: await loadPipeline(join(dir, 'demo.yaml'), { toolNames: builtinTools().names() }) };
  }

  it('reads the message at the same turn again, into the conversation, and finds no divergence', async () => {
    const { dir, loaded } = await pipeline();
    try {
      const result = await replayTask(told, 't1', { pipeline: loaded, tools: 'recorded' });
      expect(result.divergence).toBeUndefined();
      expect(result.replayed).toContainEqual({ kind: 'told', step: 'work', turn: 2, messageIds: ['m1'] });
      expect(result.replayed.map((fact) => fact.kind)).toEqual([
        'step',
        'tool',
        'tool result',
        'told',
        'tool',
        'tool result',
        'step end',
        'task end',
      ]);
      // The message joined the conversation before the second call: the third is asked with instructions, task,
      // the first reply and its result, the message, the second reply and its result.
      const requests = result.events.filter((e): e is EventOf<'llm.request'> => e.kind === 'llm.request');
      expect(requests.map((e) => e.data.messages)).toEqual([2, 4, 7]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('says so when the recording names a message it does not hold', async () => {
    const { dir, loaded } = await pipeline();
    try {
      const result = await replayTask(
        told.filter((e) => e.kind !== 'task.told'),
        't1',
        { pipeline: loaded, tools: 'recorded' },
      );
      expect(result.divergence?.replayed).toMatchObject({ kind: 'step end', ok: false });
      const failed = result.events.find((e) => e.kind === 'llm.error');
      expect(failed?.data).toMatchObject({
        message: expect.stringContaining('holds no task.told event of it'),
      });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
