import { buildTaskTrace } from '@troupe/client';
import type { EventData, EventKind, TroupeEvent } from '@troupe/protocol';
import { EventFactory } from '@troupe/runtime';
import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { formatTrace } from '../src/format/formatTrace.ts';

const start = Date.UTC(2026, 0, 1, 12, 0, 0);
let now = start;
const factory = new EventFactory({ now: () => now });
const scope = {
  pipeline: 'demo',
  taskId: 't1',
  traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
};
/** An event `atMs` after the start. */
const at = <K extends EventKind>(
  atMs: number,
  kind: K,
  data: z.input<(typeof EventData)[K]>,
): TroupeEvent => {
  now = start + atMs;
  return factory.make(kind, scope, data);
};
const usage = (input: number, output: number, costUsd = 0) => ({
  inputTokens: input,
  outputTokens: output,
  cachedTokens: 0,
  costUsd,
  modelCalls: 1,
});
const plan = { agent: 'planner', stepId: 't1.plan.1' };
const exec = { agent: 'coder', stepId: 't1.code.1' };
const reply = (turn: number, finishReason: string, extra: Record<string, unknown> = {}) => ({
  turn,
  provider: 'openai',
  model: 'gpt-x',
  usage: { inputTokens: 100, outputTokens: 20, cachedTokens: 40 },
  costUsd: 0.002,
  finishReason,
  content: 'ok',
  toolCalls: [],
  durationMs: 350,
  ...extra,
});

const finished: TroupeEvent[] = [
  at(0, 'task.accepted', { goal: 'write hello.md' }),
  at(5, 'step.started', { step: 'plan', agent: 'planner', round: 1, stepId: 't1.plan.1' }),
  at(6, 'llm.request', { ...plan, turn: 1, provider: 'openai', model: 'gpt-x', messages: 2, tools: [] }),
  at(400, 'llm.retry', {
    ...plan,
    turn: 1,
    provider: 'openai',
    model: 'gpt-x',
    attempt: 1,
    code: 'rate_limited',
    message: '429',
    delayMs: 500,
  }),
  at(1_000, 'llm.fallback', {
    ...plan,
    turn: 1,
    from: 'openai:gpt-x',
    to: 'anthropic:claude-y',
    code: 'rate_limited',
    message: '429',
  }),
  at(1_400, 'llm.response', { ...plan, ...reply(1, 'stop', { provider: 'anthropic', model: 'claude-y' }) }),
  at(1_401, 'step.completed', {
    step: 'plan',
    agent: 'planner',
    round: 1,
    stepId: 't1.plan.1',
    ok: true,
    output: '1. write it',
    usage: usage(100, 20, 0.002),
    turns: 1,
    durationMs: 1_396,
  }),
  at(1_410, 'step.started', { step: 'code', agent: 'coder', round: 1, stepId: 't1.code.1' }),
  at(1_411, 'llm.request', {
    ...exec,
    turn: 1,
    provider: 'openai',
    model: 'gpt-x',
    messages: 2,
    tools: ['write_file'],
  }),
  at(1_500, 'llm.response', {
    ...exec,
    ...reply(1, 'tool_calls', { toolCalls: [{ id: 'c1', name: 'write_file' }] }),
  }),
  at(1_501, 'tool.call', {
    ...exec,
    turn: 1,
    index: 0,
    callId: 'c1',
    tool: 'write_file',
    arguments: '{"path":"hello.md"}',
  }),
  at(1_502, 'approval.requested', {
    ...exec,
    approvalId: 'appr-1',
    callId: 'c1',
    tool: 'write_file',
    arguments: '{"path":"hello.md"}',
    reason: 'writes need a person',
    expiresAt: new Date(start + 3_600_000).toISOString(),
  }),
  at(13_502, 'approval.decided', { ...exec, approvalId: 'appr-1', decision: 'allow', by: 'ana' }),
  at(13_510, 'tool.result', {
    ...exec,
    turn: 1,
    index: 0,
    callId: 'c1',
    tool: 'write_file',
    ok: true,
    decision: 'allow',
    output: 'wrote 8 bytes to hello.md',
    durationMs: 4,
  }),
  at(13_600, 'llm.request', {
    ...exec,
    turn: 2,
    provider: 'openai',
    model: 'gpt-x',
    messages: 4,
    tools: ['write_file'],
  }),
  at(13_700, 'llm.error', {
    ...exec,
    turn: 2,
    provider: 'openai',
    model: 'gpt-x',
    code: 'server_error',
    message: 'HTTP 500',
  }),
  at(13_701, 'step.completed', {
    step: 'code',
    agent: 'coder',
    round: 1,
    stepId: 't1.code.1',
    ok: false,
    output: '',
    error: { code: 'server_error', message: 'agent coder: model call failed: HTTP 500' },
    usage: usage(100, 20, 0.002),
    turns: 2,
    durationMs: 12_291,
  }),
  at(13_710, 'task.failed', {
    reason: 'step_failed',
    message: 'step code (coder) failed: agent coder: model call failed: HTTP 500',
    step: 'code',
    usage: { ...usage(200, 40, 0.004), modelCalls: 3 },
    durationMs: 13_710,
  }),
];

describe('buildTaskTrace', () => {
  it('puts each model call, tool call and approval under its step, with what it cost and how long it took', () => {
    const trace = buildTaskTrace('t1', finished);
    expect(trace).toMatchObject({
      taskId: 't1',
      pipeline: 'demo',
      status: 'failed',
      goal: 'write hello.md',
      durationMs: 13_710,
    });
    expect(trace.failure).toEqual({
      reason: 'step_failed',
      message: expect.stringContaining('HTTP 500'),
      step: 'code',
    });
    expect(trace.steps.map((s) => [s.step, s.agent, s.outcome?.ok])).toEqual([
      ['plan', 'planner', true],
      ['code', 'coder', false],
    ]);
    const [planned, coded] = trace.steps;
    expect(planned?.entries).toEqual([
      {
        kind: 'model',
        turn: 1,
        model: 'openai:gpt-x',
        at: expect.any(String),
        reply: expect.objectContaining({
          model: 'anthropic:claude-y',
          inputTokens: 100,
          durationMs: 350,
          journaled: false,
        }),
        retries: [{ attempt: 1, code: 'rate_limited', delayMs: 500 }],
        fallbacks: [{ from: 'openai:gpt-x', to: 'anthropic:claude-y', code: 'rate_limited' }],
      },
    ]);
    expect(coded?.entries.map((e) => e.kind)).toEqual(['model', 'tool', 'approval', 'model']);
    expect(coded?.entries[1]).toMatchObject({
      tool: 'write_file',
      result: { ok: true, decision: 'allow', durationMs: 4 },
    });
    expect(coded?.entries[2]).toMatchObject({
      approvalId: 'appr-1',
      decided: { decision: 'allow', by: 'ana', expired: false, waitedMs: 12_000 },
    });
    expect(coded?.entries[3]).toMatchObject({ turn: 2, error: { code: 'server_error' } });
    // The final event's usage is the task's; the counts come from the tree.
    expect(trace.totals).toEqual({
      inputTokens: 200,
      outputTokens: 40,
      cachedTokens: 0,
      costUsd: 0.004,
      modelCalls: 3,
      toolCalls: 1,
      approvals: 1,
      questions: 0,
      retries: 1,
      fallbacks: 1,
      errors: 2,
    });
  });

  it('shows a running task as far as it got, summing what its replies cost so far', () => {
    const running = finished.slice(0, 12);
    const trace = buildTaskTrace('t1', running);
    expect(trace.status).toBe('running');
    expect(trace.steps[1]?.outcome).toBeUndefined();
    expect(trace.steps[1]?.entries.at(-1)).toMatchObject({ kind: 'approval', approvalId: 'appr-1' });
    expect(trace.steps[1]?.entries.at(-1)).not.toHaveProperty('decided');
    expect(trace.totals).toMatchObject({
      modelCalls: 2,
      inputTokens: 200,
      outputTokens: 40,
      cachedTokens: 80,
    });
  });

  it('keeps the call that was made when a resumed run replays it, and lists an approval once', () => {
    const replayed = [
      at(20_000, 'task.resumed', { state: 'code', round: 1, deliveries: 2 }),
      at(20_001, 'llm.response', {
        ...exec,
        ...reply(1, 'tool_calls', { toolCalls: [{ id: 'c1', name: 'write_file' }], journaled: true }),
      }),
      at(20_002, 'tool.result', {
        ...exec,
        turn: 1,
        index: 0,
        callId: 'c1',
        tool: 'write_file',
        ok: true,
        decision: 'allow',
        output: 'wrote 8 bytes to hello.md',
        durationMs: 0,
        journaled: true,
      }),
      at(20_003, 'approval.requested', {
        ...exec,
        approvalId: 'appr-1',
        callId: 'c1',
        tool: 'write_file',
        arguments: '{"path":"hello.md"}',
        reason: 'writes need a person',
        expiresAt: new Date(start + 3_600_000).toISOString(),
      }),
    ];
    const events = [...finished.slice(0, 14), ...replayed];
    const trace = buildTaskTrace('t1', events);
    expect(trace.resumed).toBe(1);
    const coded = trace.steps[1];
    expect(coded?.entries.map((e) => e.kind)).toEqual(['model', 'tool', 'approval']);
    expect(coded?.entries[0]).toMatchObject({ reply: { journaled: false, durationMs: 350 } });
    expect(coded?.entries[1]).toMatchObject({ result: { journaled: false, durationMs: 4 } });
  });

  it('says an approval closed by its step stopping was closed, not left undecided', () => {
    const closed = [
      ...finished.slice(0, 12),
      at(5_000, 'approval.decided', {
        ...exec,
        approvalId: 'appr-1',
        decision: 'deny',
        reason: 'closed before anyone decided: task t1 has ended: cancelled',
        by: 'troupe',
        expired: true,
      }),
    ];
    expect(formatTrace(buildTaskTrace('t1', closed), { color: false })).toContain(
      'approval appr-1 for write_file · closed after 3.5 s: closed before anyone decided: task t1 has ended: cancelled',
    );
  });

  it('counts a summary as a model call, once, and says which model wrote it', () => {
    const compacted = (atMs: number, journaled: boolean) =>
      at(atMs, 'context.compacted', {
        ...exec,
        index: 1,
        before: 10,
        after: 9,
        estimatedTokens: 9_000,
        summary: 'so far',
        provider: 'anthropic',
        model: 'claude-y',
        usage: { inputTokens: 900, outputTokens: 60, cachedTokens: 0 },
        costUsd: 0.01,
        durationMs: 1_200,
        ...(journaled ? { journaled: true } : {}),
      });
    const events = [...finished.slice(0, 12), compacted(13_000, false), compacted(20_000, true)];
    const trace = buildTaskTrace('t1', events);
    const summaries = trace.steps[1]?.entries.filter((e) => e.kind === 'compaction');
    expect(summaries).toHaveLength(1);
    expect(trace.totals).toMatchObject({ modelCalls: 3, inputTokens: 1_100, outputTokens: 100 });
    expect(formatTrace(trace, { color: false })).toContain(
      'summary: 10 messages → 9 (about 9000 tokens before) · by anthropic:claude-y · 900→60 tok · $0.0100 · 1.2 s',
    );
  });

  it('ignores events of other tasks and takes a step its start event never reached', () => {
    const other = { ...finished[2], taskId: 't2' } as TroupeEvent;
    const trace = buildTaskTrace('t1', [other, finished[2] as TroupeEvent]);
    expect(trace.steps).toHaveLength(1);
    expect(trace.steps[0]).toMatchObject({
      stepId: 't1.plan.1',
      agent: 'planner',
      entries: [{ kind: 'model' }],
    });
  });
  it('puts a question to a person under its step, once, with the answer and how long it waited', () => {
    const review = { agent: 'reviewer', stepId: 't1.review.1' };
    const asked = (atMs: number) =>
      at(atMs, 'human.asked', { ...review, questionId: 'q-1', question: 'ship it?' });
    const trace = buildTaskTrace('t1', [
      asked(1_000),
      // A resumed run asks the same question again: it is one question, asked when it was first.
      asked(4_000),
      at(6_500, 'human.answered', { ...review, questionId: 'q-1', answer: 'yes', by: 'ana' }),
      // An answer to a question the trace never saw asked adds nothing.
      at(7_000, 'human.answered', { ...review, questionId: 'q-2', answer: 'no' }),
      at(8_000, 'tool.result', {
        ...review,
        turn: 2,
        index: 0,
        callId: 'c9',
        tool: 'run_tests',
        ok: false,
        decision: 'allow',
        output: '',
        error: { code: 'exit_code', message: 'exit 1' },
        durationMs: 30,
      }),
      at(9_000, 'task.failed', {
        reason: 'step_failed',
        message: 'review failed',
        step: 'review',
        usage: usage(0, 0),
        durationMs: 8_000,
      }),
    ]);
    expect(trace.steps).toHaveLength(1);
    expect(trace.steps[0]).toMatchObject({
      stepId: 't1.review.1',
      agent: 'reviewer',
      step: 't1.review.1',
      round: 1,
    });
    expect(trace.steps[0]?.entries).toEqual([
      {
        kind: 'question',
        questionId: 'q-1',
        question: 'ship it?',
        at: new Date(start + 1_000).toISOString(),
        answered: { answer: 'yes', by: 'ana', waitedMs: 5_500 },
      },
      // Its call event lost, the result still shows, without arguments.
      {
        kind: 'tool',
        callId: 'c9',
        tool: 'run_tests',
        arguments: '',
        at: new Date(start + 8_000).toISOString(),
        result: {
          ok: false,
          decision: 'allow',
          output: '',
          durationMs: 30,
          error: { code: 'exit_code', message: 'exit 1' },
          journaled: false,
        },
      },
    ]);
    expect(trace).toMatchObject({
      status: 'failed',
      durationMs: 8_000,
      failure: { reason: 'step_failed', message: 'review failed', step: 'review' },
    });
    expect(trace.totals).toMatchObject({
      questions: 1,
      toolCalls: 1,
      errors: 1,
      approvals: 0,
      modelCalls: 1,
    });
    expect(trace.flow).toEqual([{ kind: 'step', stepId: 't1.review.1' }]);
  });
});

describe('a trace of prompt cache reads and writes', () => {
  const cached = (agent: typeof plan, turn: number, read: number, write: number, atMs: number) =>
    at(atMs, 'llm.response', {
      ...agent,
      ...reply(turn, 'stop', {
        provider: 'anthropic',
        model: 'claude-y',
        usage: {
          inputTokens: 1_200,
          outputTokens: 80,
          cachedTokens: read,
          ...(write > 0 ? { cacheWriteTokens: write } : {}),
        },
      }),
    });
  const stepDone = (agent: typeof plan, step: string, read: number, write: number, atMs: number) =>
    at(atMs, 'step.completed', {
      step,
      agent: agent.agent,
      round: 1,
      stepId: agent.stepId,
      ok: true,
      output: 'ok',
      usage: { ...usage(2_400, 160, 0.01), cachedTokens: read, cacheWriteTokens: write, modelCalls: 2 },
      turns: 2,
      durationMs: 100,
    });
  const running = [
    at(0, 'task.accepted', { goal: 'write hello.md' }),
    at(1, 'step.started', { step: 'plan', agent: 'planner', round: 1, stepId: plan.stepId }),
    cached(plan, 1, 0, 1_000, 10),
    cached(plan, 2, 900, 250, 20),
    stepDone(plan, 'plan', 900, 1_250, 21),
    at(30, 'step.started', { step: 'code', agent: 'coder', round: 1, stepId: exec.stepId }),
    cached(exec, 1, 0, 1_100, 40),
  ];

  it('sums the reads and writes of a running task’s calls across its steps', () => {
    const trace = buildTaskTrace('t1', running);
    expect(trace.steps[0]?.entries[0]).toMatchObject({
      reply: { cachedTokens: 0, cacheWriteTokens: 1_000 },
    });
    expect(trace.totals).toMatchObject({
      modelCalls: 3,
      inputTokens: 3_600,
      cachedTokens: 900,
      cacheWriteTokens: 2_350,
    });
  });

  it('says them apart on each call, each step and the totals', () => {
    const ended = [
      ...running,
      stepDone(exec, 'code', 0, 1_100, 41),
      at(50, 'task.completed', {
        output: 'ok',
        rounds: 1,
        usage: { ...usage(3_600, 240, 0.02), cachedTokens: 900, cacheWriteTokens: 2_350, modelCalls: 3 },
        usageByAgent: {},
        durationMs: 50,
      }),
    ];
    const lines = formatTrace(buildTaskTrace('t1', ended), { color: false }).split('\n');
    expect(lines.filter((l) => l.includes('model anthropic:claude-y'))).toEqual([
      '│  ├─ model anthropic:claude-y · turn 1 · 1200→80 tok (1000 cache write) · $0.0020 · 0.3 s · stop',
      '│  └─ model anthropic:claude-y · turn 2 · 1200→80 tok (900 cache read, 250 cache write) · $0.0020 · 0.3 s · stop',
      '   └─ model anthropic:claude-y · turn 1 · 1200→80 tok (1100 cache write) · $0.0020 · 0.3 s · stop',
    ]);
    expect(lines[2]).toBe(
      '├─ plan · planner · round 1 · ok · 0.1 s · 2400→160 tok (900 cache read, 1250 cache write) · $0.0100',
    );
    expect(lines.at(-1)).toBe(
      'totals: 3 model calls · 3600→240 tok (900 cache read, 2350 cache write) · $0.0200 · 0 tool calls',
    );
  });
});

describe('formatTrace', () => {
  it('draws the task as a tree with each call on a line, and the totals last', () => {
    const text = formatTrace(buildTaskTrace('t1', finished), { color: false });
    expect(text.split('\n')).toEqual([
      'task t1 · demo · failed in 14 s',
      'goal: write hello.md',
      '├─ plan · planner · round 1 · ok · 1.4 s · 100→20 tok · $0.0020',
      '│  └─ model anthropic:claude-y · turn 1 · 100→20 tok (40 cache read) · $0.0020 · 0.3 s · stop',
      '│        retry after attempt 1: rate_limited, waited 0.5 s',
      '│        fallback openai:gpt-x → anthropic:claude-y (rate_limited)',
      '└─ code · coder · round 1 · failed (server_error) · 12 s · 100→20 tok · $0.0020',
      '   ├─ model openai:gpt-x · turn 1 · 100→20 tok (40 cache read) · $0.0020 · 0.3 s · tool_calls',
      '   ├─ tool write_file({"path":"hello.md"}) · allow · ok · 0.0 s · wrote 8 bytes to hello.md',
      '   ├─ approval appr-1 for write_file · allowed by ana after 12 s',
      '   └─ model openai:gpt-x · turn 2 · server_error: HTTP 500',
      '      server_error: agent coder: model call failed: HTTP 500',
      'failed: step_failed: step code (coder) failed: agent coder: model call failed: HTTP 500',
      'totals: 3 model calls · 200→40 tok · $0.0040 · 1 tool call · 1 approval · 1 retry · 1 fallback · 2 errors',
    ]);
  });

  it('says where a tool result too large for its event is kept, and how to see it whole', () => {
    const outputRef = {
      bucket: 'troupe-values-demo',
      name: 't1.code.1.1.0.result',
      bytes: 5_242_880,
      sha256: 'a'.repeat(64),
    };
    const events = finished.map((event) =>
      event.kind === 'tool.result' ? { ...event, data: { ...event.data, outputRef } } : event,
    );
    expect(formatTrace(buildTaskTrace('t1', events), { color: false })).toContain(
      'wrote 8 bytes to hello.md (5242880 bytes in troupe-values-demo; troupe trace --json gives it whole)',
    );
  });
});

/** A step that ran and ended well, with where it ran. */
const ran = (atMs: number, step: string, agent: string, extra: Record<string, unknown> = {}) => {
  const item = (extra.within as { item?: number }[] | undefined)?.at(-1)?.item;
  const stepId = `t1.${step}.1${item === undefined ? '' : `.i${item}`}`;
  return [
    at(atMs, 'step.started', { step, agent, round: 1, stepId, ...extra }),
    at(atMs + 100, 'step.completed', {
      step,
      agent,
      round: 1,
      stepId,
      ok: true,
      output: 'done',
      usage: usage(10, 5),
      turns: 1,
      durationMs: 100,
    }),
  ];
};

/** A task whose flow routes, runs branches (one failing, one never run), items (one failing) and a sub-pipeline. */
const shaped: TroupeEvent[] = [
  at(0, 'task.accepted', { goal: 'ship it' }),
  ...ran(10, 'plan', 'planner'),
  at(200, 'route.chosen', {
    step: 'pick',
    round: 1,
    value: 'build',
    case: 'build',
    target: 'build',
    agent: 'router',
    reason: 'it asks for a feature',
  }),
  at(210, 'step.skipped', { step: 'notify', round: 1, when: 'input.loud' }),
  ...ran(300, 'code', 'coder', { within: [{ step: 'build', branch: 'code' }] }),
  at(310, 'step.started', {
    step: 'docs',
    agent: 'writer',
    round: 1,
    stepId: 't1.docs.1',
    within: [{ step: 'build', branch: 'docs' }],
  }),
  at(400, 'step.completed', {
    step: 'docs',
    agent: 'writer',
    round: 1,
    stepId: 't1.docs.1',
    ok: false,
    output: '',
    error: { code: 'server_error', message: 'the docs site is down' },
    usage: usage(0, 0),
    turns: 1,
    durationMs: 90,
  }),
  at(410, 'branches.joined', {
    step: 'build',
    round: 1,
    join: 'all',
    branches: {
      code: { status: 'completed' },
      docs: { status: 'failed', message: 'the docs site is down' },
      tests: { status: 'stopped' },
    },
    ok: true,
  }),
  at(420, 'route.chosen', { step: 'size', round: 1, value: 'huge', target: 'each' }),
  {
    ...at(500, 'agent.handoff', {
      step: 'part',
      round: 1,
      reason: 'next',
      join: 'build',
      item: 0,
      within: [{ step: 'each', item: 0 }],
    }),
    from: 'build',
    to: 'builder',
  } as TroupeEvent,
  ...ran(510, 'part', 'builder', { item: 0, within: [{ step: 'each', item: 0, value: '"parser"' }] }),
  ...ran(700, 'part', 'builder', { item: 1, within: [{ step: 'each', item: 1, value: '"storage"' }] }),
  at(900, 'items.joined', {
    step: 'each',
    round: 1,
    items: 3,
    completed: 2,
    failed: [{ index: 2, message: 'no such part' }],
    stopped: 0,
    ok: true,
  }),
  ...ran(1_000, 'sub', 'pipeline', { subTask: { taskId: 't1-sub-1-abcdef', pipeline: 'outline' } }),
  at(1_200, 'task.completed', {
    output: 'done',
    rounds: 1,
    usage: usage(50, 25),
    usageByAgent: {},
    durationMs: 1_200,
  }),
];

describe('the flow in a trace', () => {
  it('keeps the flow in order: steps, routes with their reason, skips, joins and hand-offs, each where it ran', () => {
    const trace = buildTaskTrace('t1', shaped);
    expect(
      trace.flow.map((n) => (n.kind === 'step' ? n.stepId : `${n.kind} ${'step' in n ? n.step : ''}`)),
    ).toEqual([
      't1.plan.1',
      'route pick',
      'skipped notify',
      't1.code.1',
      't1.docs.1',
      'branches build',
      'route size',
      'handoff part',
      't1.part.1.i0',
      't1.part.1.i1',
      'items each',
      't1.sub.1',
    ]);
    expect(trace.flow[1]).toMatchObject({
      kind: 'route',
      target: 'build',
      agent: 'router',
      reason: 'it asks for a feature',
    });
    expect(trace.flow[7]).toMatchObject({
      kind: 'handoff',
      join: 'build',
      within: [{ step: 'each', item: 0 }],
    });
    expect(trace.steps.find((s) => s.stepId === 't1.part.1.i1')?.within).toEqual([
      { step: 'each', item: 1, value: '"storage"' },
    ]);
    expect(trace.steps.find((s) => s.step === 'sub')?.subTask).toEqual({
      taskId: 't1-sub-1-abcdef',
      pipeline: 'outline',
    });
  });

  it('takes a flow decision said again by a resumed run once', () => {
    const again = shaped.filter((e) => e.kind === 'route.chosen' || e.kind === 'branches.joined');
    const trace = buildTaskTrace('t1', [...shaped.slice(0, -1), ...again, ...shaped.slice(-1)]);
    expect(trace.flow.filter((n) => n.kind === 'route')).toHaveLength(2);
    expect(trace.flow.filter((n) => n.kind === 'branches')).toHaveLength(1);
  });

  it('reads events from before the flow was recorded as a line of steps', () => {
    const trace = buildTaskTrace('t1', finished);
    expect(trace.flow).toEqual([
      { kind: 'step', stepId: 't1.plan.1' },
      { kind: 'step', stepId: 't1.code.1' },
    ]);
    expect(trace.steps.every((s) => s.within === undefined)).toBe(true);
  });

  it('draws branches and items nested under their step, with how each ended, and the sub-task under its step', () => {
    const trace = buildTaskTrace('t1', shaped);
    const sub = buildTaskTrace(
      't1-sub-1-abcdef',
      [
        at(1_010, 'task.accepted', { goal: 'outline' }),
        ...ran(1_020, 'outline', 'outliner'),
        at(1_150, 'task.completed', {
          output: 'o',
          rounds: 1,
          usage: usage(1, 1),
          usageByAgent: {},
          durationMs: 140,
        }),
      ].map((event) => ({ ...event, taskId: 't1-sub-1-abcdef' })),
    );
    const nested = {
      ...trace,
      steps: trace.steps.map((s) => (s.subTask ? { ...s, subTask: { ...s.subTask, trace: sub } } : s)),
    };
    const lines = formatTrace(nested, { color: false })
      .split('\n')
      .map((line) => line.replace(/ · 0\.1 s · .*$/, ''));
    expect(lines).toEqual([
      'task t1 · demo · completed in 1.2 s',
      'goal: ship it',
      '├─ plan · planner · round 1 · ok',
      '├─ route pick → build · by router: it asks for a feature',
      '├─ notify · skipped: input.loud was false',
      '├─ build · parallel · joined (all) · ok',
      '│  ├─ branch code · completed',
      '│  │  └─ code · coder · round 1 · ok',
      '│  ├─ branch docs · failed: the docs site is down',
      '│  │  └─ docs · writer · round 1 · failed (server_error)',
      '│  │        server_error: the docs site is down',
      '│  └─ branch tests · stopped',
      '├─ route size → each · "huge" matched no case: default',
      '├─ each · foreach · 3 items, 2 completed, 1 failed · ok',
      '│  ├─ item 0: "parser"',
      '│  │  ├─ hand-off from the join of build → builder (part)',
      '│  │  └─ part · builder · round 1 · ok',
      '│  ├─ item 1: "storage"',
      '│  │  └─ part · builder · round 1 · ok',
      '│  └─ item 2 · failed: no such part',
      '└─ sub · pipeline · round 1 · ok',
      '   └─ sub-task t1-sub-1-abcdef · outline · completed in 0.1 s',
      '      └─ outline · outliner · round 1 · ok',
      'totals: 1 model call · 50→25 tok · $0.0000 · 0 tool calls · 1 error',
    ]);
  });

  it('says when a sub-task named by its step has no stored events', () => {
    expect(formatTrace(buildTaskTrace('t1', shaped), { color: false })).toContain(
      '└─ sub-task t1-sub-1-abcdef · outline · its events are not stored',
    );
  });
});
