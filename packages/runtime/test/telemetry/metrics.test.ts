import type { EventData, EventKind } from '@troupe/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { EventFactory } from '../../src/events/eventFactory.ts';
import { type MetricsServer, parseListen, serveMetrics, TroupeMetrics } from '../../src/telemetry/metrics.ts';

const factory = new EventFactory({ now: () => Date.UTC(2026, 0, 1) });
const scope = { pipeline: 'demo', taskId: 't1', traceparent: '' };
const event = <K extends EventKind>(kind: K, data: z.input<(typeof EventData)[K]>) =>
  factory.make(kind, scope, data);
const usage = { inputTokens: 100, outputTokens: 20, cachedTokens: 40, costUsd: 0.5, modelCalls: 1 };
const ref = { agent: 'coder', stepId: 't1.code.1' };
const reply = (journaled = false) =>
  event('llm.response', {
    ...ref,
    turn: 1,
    provider: 'openai',
    model: 'gpt-x',
    usage: { inputTokens: 100, outputTokens: 20, cachedTokens: 40 },
    costUsd: 0.002,
    finishReason: 'stop',
    content: 'ok',
    toolCalls: [],
    durationMs: 300,
    ...(journaled ? { journaled: true } : {}),
  });

/** The value of one sample of the text format, by its name and labels as written. */
const sample = (text: string, series: string): number | undefined => {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
};

describe('TroupeMetrics', () => {
  it('counts tasks, steps, model calls, tokens, cost, tools and approvals from the events published', async () => {
    const metrics = new TroupeMetrics();
    for (const e of [
      reply(),
      reply(true),
      event('llm.retry', {
        ...ref,
        turn: 1,
        provider: 'openai',
        model: 'gpt-x',
        attempt: 1,
        code: 'rate_limited',
        message: '429',
        delayMs: 500,
      }),
      event('llm.error', {
        ...ref,
        turn: 2,
        provider: 'openai',
        model: 'gpt-x',
        code: 'server_error',
        message: '500',
      }),
      event('tool.result', {
        ...ref,
        turn: 1,
        index: 0,
        callId: 'c1',
        tool: 'write_file',
        ok: true,
        decision: 'allow',
        output: 'ok',
        durationMs: 2,
      }),
      event('tool.result', {
        ...ref,
        turn: 1,
        index: 1,
        callId: 'c2',
        tool: 'write_file',
        ok: false,
        decision: 'deny',
        output: 'no',
        error: { code: 'denied', message: 'no' },
        durationMs: 0,
      }),
      event('approval.requested', {
        ...ref,
        approvalId: 'a1',
        callId: 'c1',
        tool: 'write_file',
        arguments: '{}',
        reason: 'ask',
        expiresAt: '2026-01-02T00:00:00.000Z',
      }),
      event('approval.requested', {
        ...ref,
        approvalId: 'a2',
        callId: 'c2',
        tool: 'write_file',
        arguments: '{}',
        reason: 'ask',
        expiresAt: '2026-01-02T00:00:00.000Z',
      }),
      event('approval.decided', { ...ref, approvalId: 'a1', decision: 'allow', by: 'ana' }),
      // The same decision seen again (a resumed step publishes it again) does not close another.
      event('approval.decided', { ...ref, approvalId: 'a1', decision: 'allow', by: 'ana' }),
      event('step.completed', {
        step: 'code',
        agent: 'coder',
        round: 1,
        stepId: 't1.code.1',
        ok: true,
        output: 'ok',
        usage,
        turns: 1,
        durationMs: 1_500,
      }),
      event('task.completed', { output: 'ok', rounds: 1, usage, usageByAgent: {}, durationMs: 2_000 }),
      event('task.failed', { reason: 'max_deliveries', message: 'given up', usage, durationMs: 9_000 }),
    ])
      metrics.observe(e);
    const text = await metrics.registry.metrics();
    expect(sample(text, 'troupe_tasks_total{pipeline="demo",outcome="completed"}')).toBe(1);
    expect(sample(text, 'troupe_tasks_total{pipeline="demo",outcome="failed"}')).toBe(1);
    expect(sample(text, 'troupe_task_failures_total{pipeline="demo",reason="max_deliveries"}')).toBe(1);
    expect(sample(text, 'troupe_dead_letters_total{pipeline="demo"}')).toBe(1);
    expect(sample(text, 'troupe_task_duration_seconds_count{pipeline="demo",outcome="completed"}')).toBe(1);
    expect(sample(text, 'troupe_task_duration_seconds_sum{pipeline="demo",outcome="completed"}')).toBe(2);
    expect(sample(text, 'troupe_steps_total{pipeline="demo",agent="coder",outcome="ok"}')).toBe(1);
    expect(sample(text, 'troupe_step_duration_seconds_sum{pipeline="demo",agent="coder"}')).toBe(1.5);
    // The journaled reply is no model call.
    expect(sample(text, 'troupe_model_calls_total{provider="openai",model="gpt-x",outcome="ok"}')).toBe(1);
    expect(
      sample(text, 'troupe_model_calls_total{provider="openai",model="gpt-x",outcome="server_error"}'),
    ).toBe(1);
    expect(sample(text, 'troupe_model_tokens_total{provider="openai",model="gpt-x",type="input"}')).toBe(100);
    expect(sample(text, 'troupe_model_tokens_total{provider="openai",model="gpt-x",type="cached"}')).toBe(40);
    expect(sample(text, 'troupe_model_cost_usd_total{provider="openai",model="gpt-x"}')).toBe(0.002);
    expect(
      sample(text, 'troupe_model_retries_total{provider="openai",model="gpt-x",code="rate_limited"}'),
    ).toBe(1);
    expect(sample(text, 'troupe_tool_calls_total{tool="write_file",decision="allow",outcome="ok"}')).toBe(1);
    expect(sample(text, 'troupe_tool_calls_total{tool="write_file",decision="deny",outcome="denied"}')).toBe(
      1,
    );
    expect(sample(text, 'troupe_approvals_total{decision="allow"}')).toBe(2);
    // Pending requests are read from the human gates when scraped, not counted from events.
    expect(sample(text, 'troupe_approvals_pending')).toBe(0);
    expect(sample(text, 'troupe_event_outbox_backlog')).toBe(0);
    // The process's own metrics come with them.
    expect(text).toContain('process_cpu_user_seconds_total');
  });
});

describe('TroupeMetrics: prompt cache', () => {
  it('counts tokens written to the prompt cache as cache_write, apart from those read (cached)', async () => {
    const metrics = new TroupeMetrics();
    const call = (usage: Record<string, number>, journaled = false) =>
      metrics.observe(
        event('llm.response', {
          ...ref,
          turn: 1,
          provider: 'anthropic',
          model: 'claude-y',
          usage: { inputTokens: 1_200, outputTokens: 20, cachedTokens: 0, ...usage },
          costUsd: 0.004,
          finishReason: 'stop',
          content: 'ok',
          toolCalls: [],
          durationMs: 300,
          ...(journaled ? { journaled: true } : {}),
        }),
      );
    call({ cacheWriteTokens: 1_000, cacheWrite1hTokens: 1_000 });
    call({ cachedTokens: 1_000, cacheWriteTokens: 150 });
    // Replayed from the journal: nothing was read or written again.
    call({ cachedTokens: 1_000, cacheWriteTokens: 150 }, true);
    // From a provider that reports no writes.
    call({ cachedTokens: 100 });
    const text = await metrics.registry.metrics();
    const tokens = (type: string) =>
      sample(text, `troupe_model_tokens_total{provider="anthropic",model="claude-y",type="${type}"}`);
    expect(tokens('input')).toBe(3_600);
    expect(tokens('cached')).toBe(1_100);
    expect(tokens('cache_write')).toBe(1_150);
    expect(sample(text, 'troupe_model_cost_usd_total{provider="anthropic",model="claude-y"}')).toBeCloseTo(
      0.012,
      10,
    );
  });
});

describe('TroupeMetrics: summaries', () => {
  const summary = (extra: Record<string, unknown>) =>
    event('context.compacted', {
      ...ref,
      before: 12,
      after: 8,
      estimatedTokens: 9_000,
      summary: 'so far: wrote a.ts',
      ...extra,
    });

  it('counts a summary as a model call of the model that wrote it, with its tokens and cost', async () => {
    const metrics = new TroupeMetrics();
    const spent = { usage: { inputTokens: 900, outputTokens: 60, cachedTokens: 0 }, costUsd: 0.01 };
    metrics.observe(
      summary({ index: 1, provider: 'anthropic', model: 'claude-x', durationMs: 800, ...spent }),
    );
    // Replayed from the journal: the model was not asked again.
    metrics.observe(
      summary({
        index: 1,
        provider: 'anthropic',
        model: 'claude-x',
        durationMs: 800,
        journaled: true,
        ...spent,
      }),
    );
    // From before summaries said who wrote them: nothing to label it with.
    metrics.observe(summary({}));
    const text = await metrics.registry.metrics();
    expect(sample(text, 'troupe_model_calls_total{provider="anthropic",model="claude-x",outcome="ok"}')).toBe(
      1,
    );
    expect(
      sample(text, 'troupe_model_tokens_total{provider="anthropic",model="claude-x",type="input"}'),
    ).toBe(900);
    expect(sample(text, 'troupe_model_cost_usd_total{provider="anthropic",model="claude-x"}')).toBe(0.01);
    expect(
      sample(text, 'troupe_model_call_duration_seconds_sum{provider="anthropic",model="claude-x"}'),
    ).toBe(0.8);
  });
});

describe('TroupeMetrics: online scores', () => {
  const score = (scorer: string, value: number, pass: boolean, reason = 'ok', error?: true) => ({
    scorer,
    type: 'cel',
    value,
    threshold: 1,
    pass,
    reason,
    ...(error ? { error } : {}),
  });
  const scored = (data: Partial<z.input<(typeof EventData)['eval.scored']>>) =>
    event('eval.scored', {
      status: 'completed',
      scores: [],
      pass: false,
      sample: 1,
      costUsd: 0,
      durationMs: 5,
      ...data,
    });

  it('observes each score by scorer, and counts it as a pass, a fail or an error (a scorer that threw, or the run)', async () => {
    const metrics = new TroupeMetrics();
    metrics.observe(
      scored({
        scores: [
          score('few rounds', 1, true),
          score('helpful', 0.3, false),
          score('style', 0, false, 'error: boom', true),
          // A module scorer's own reason that reads like an error is a failed check.
          score('cites', 0, false, 'error: no citation'),
        ],
      }),
    );
    metrics.observe(scored({ scores: [score('few rounds', 0, false)] }));
    metrics.observe(scored({ error: 'the EVENTS stream is out of reach' }));
    const text = await metrics.registry.metrics();
    const checks = (scorer: string, result: string) =>
      sample(text, `troupe_eval_checks_total{pipeline="demo",scorer="${scorer}",result="${result}"}`);
    expect(checks('few rounds', 'pass')).toBe(1);
    expect(checks('few rounds', 'fail')).toBe(1);
    expect(checks('helpful', 'fail')).toBe(1);
    expect(checks('style', 'error')).toBe(1);
    expect(checks('style', 'fail')).toBeUndefined();
    expect(checks('cites', 'fail')).toBe(1);
    expect(checks('cites', 'error')).toBeUndefined();
    expect(checks('(all)', 'error')).toBe(1);
    expect(sample(text, 'troupe_eval_score_count{pipeline="demo",scorer="few rounds"}')).toBe(2);
    expect(sample(text, 'troupe_eval_score_sum{pipeline="demo",scorer="few rounds"}')).toBe(1);
    expect(sample(text, 'troupe_eval_score_bucket{le="0.3",pipeline="demo",scorer="helpful"}')).toBe(1);
    expect(sample(text, 'troupe_eval_score_bucket{le="0.2",pipeline="demo",scorer="helpful"}')).toBe(0);
  });
});

describe('TroupeMetrics: what is read when scraped', () => {
  it('sums what each human gate waits on, until the gate is let go', async () => {
    const metrics = new TroupeMetrics();
    let waiting = 2;
    const stop = metrics.countPending(() => waiting);
    metrics.countPending(() => 1);
    expect(sample(await metrics.registry.metrics(), 'troupe_approvals_pending')).toBe(3);
    waiting = 0;
    expect(sample(await metrics.registry.metrics(), 'troupe_approvals_pending')).toBe(1);
    stop();
    waiting = 5;
    expect(sample(await metrics.registry.metrics(), 'troupe_approvals_pending')).toBe(1);
  });

  it('keeps model error labels to the known codes', async () => {
    const metrics = new TroupeMetrics();
    metrics.observe(
      event('llm.error', {
        ...ref,
        turn: 1,
        provider: 'openai',
        model: 'gpt-x',
        code: 'ECONNRESET',
        message: 'reset',
      }),
    );
    expect(
      sample(
        await metrics.registry.metrics(),
        'troupe_model_calls_total{provider="openai",model="gpt-x",outcome="other"}',
      ),
    ).toBe(1);
  });
});

describe('the metrics server', () => {
  let server: MetricsServer | undefined;
  afterEach(async () => {
    await server?.close();
  });

  it('serves the text format on /metrics and 404 elsewhere', async () => {
    const metrics = new TroupeMetrics();
    metrics.observe(reply());
    server = await serveMetrics(metrics, { host: '127.0.0.1', port: 0 });
    const response = await fetch(server.url);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toContain('text/plain');
    expect(await response.text()).toContain(
      'troupe_model_calls_total{provider="openai",model="gpt-x",outcome="ok"} 1',
    );
    expect((await fetch(server.url.replace('/metrics', '/'))).status).toBe(404);
  });

  it('fails to start, saying why, on a port already taken', async () => {
    server = await serveMetrics(new TroupeMetrics(), { host: '127.0.0.1', port: 0 });
    const port = Number(new URL(server.url).port);
    await expect(serveMetrics(new TroupeMetrics(), { host: '127.0.0.1', port })).rejects.toThrow(
      /EADDRINUSE/,
    );
  });

  it('reads where to listen: a port, or host:port', () => {
    expect(parseListen('9464')).toEqual({ host: '127.0.0.1', port: 9464 });
    expect(parseListen('0.0.0.0:9464')).toEqual({ host: '0.0.0.0', port: 9464 });
    expect(parseListen('[::1]:9464')).toEqual({ host: '::1', port: 9464 });
    for (const bad of ['', 'x', '70000', 'host:', ':']) expect(parseListen(bad), bad).toBeUndefined();
  });
});
