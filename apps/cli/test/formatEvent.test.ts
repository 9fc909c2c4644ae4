import type { TroupeEvent } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { formatEvent } from '../src/format/formatEvent.ts';

const progress = (data: Partial<Extract<TroupeEvent, { kind: 'tool.progress' }>['data']>): TroupeEvent => ({
  id: 'task-1:tool.progress:task-1.execute.1:call-1:0',
  ts: '2026-11-29T12:00:01.250Z',
  pipeline: 'demo',
  taskId: 'task-1',
  kind: 'tool.progress',
  from: 'tool:files.copy',
  to: 'executor',
  traceparent: '00-228501cfd9ddc401a594405b2e1a9608-214fbd37f4df7231-01',
  data: {
    agent: 'executor',
    stepId: 'task-1.execute.1',
    callId: 'call-1',
    tool: 'files.copy',
    seq: 0,
    progress: 40,
    ...data,
  },
});

describe('formatEvent: tool.progress', () => {
  it('shows the tool, how far it got of how much, and its message on one line', () => {
    const line = formatEvent(progress({ total: 100, message: 'copying\nb.txt' }), { color: false });
    expect(line).toMatch(/^12:00:01\.250 {2}demo\/task-1 {2}tool:files\.copy → executor +tool\.progress +/);
    expect(line.endsWith('  files.copy 40/100 copying b.txt')).toBe(true);
  });

  it('shows the progress alone when there is no total and no message', () => {
    expect(formatEvent(progress({}), { color: false }).endsWith('  files.copy 40')).toBe(true);
  });
});

describe('formatEvent: a model reply', () => {
  const response = (usage: Record<string, number>): TroupeEvent => ({
    id: 'task-1:llm.response:task-1.execute.1:1',
    ts: '2026-11-29T12:00:01.250Z',
    pipeline: 'demo',
    taskId: 'task-1',
    kind: 'llm.response',
    from: 'anthropic:claude-y',
    to: 'executor',
    traceparent: '00-228501cfd9ddc401a594405b2e1a9608-214fbd37f4df7231-01',
    data: {
      agent: 'executor',
      stepId: 'task-1.execute.1',
      turn: 1,
      provider: 'anthropic',
      model: 'claude-y',
      usage: { inputTokens: 1200, outputTokens: 80, cachedTokens: 0, ...usage },
      costUsd: 0.004,
      finishReason: 'tool_calls',
      content: '',
      toolCalls: [{ id: 'c1', name: 'write_file' }],
      durationMs: 300,
    },
  });

  it('shows its tokens with the prompt cache’s reads and writes apart, then its cost', () => {
    const line = (usage: Record<string, number>) => formatEvent(response(usage), { color: false });
    expect(line({ cachedTokens: 900, cacheWriteTokens: 250 })).toMatch(
      /llm\.response +1200→80 tok \(900 cache read, 250 cache write\) \$0\.0040 · calls write_file$/,
    );
    expect(line({})).toMatch(/llm\.response +1200→80 tok \$0\.0040 · calls write_file$/);
  });
});

describe('formatEvent: values kept in the object store', () => {
  it('says where the whole of a task output shown in part is', () => {
    const event: TroupeEvent = {
      id: 'task-1:task.completed',
      ts: '2026-11-29T12:00:02.000Z',
      pipeline: 'demo',
      taskId: 'task-1',
      kind: 'task.completed',
      traceparent: '00-228501cfd9ddc401a594405b2e1a9608-214fbd37f4df7231-01',
      data: {
        output: 'xxxx\n…[cut: showing 4 of 2097152 bytes; …]',
        outputRef: {
          bucket: 'troupe-values-demo',
          name: 'task-1.write.1.output',
          bytes: 2_097_152,
          sha256: 'a'.repeat(64),
        },
        rounds: 1,
        usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0, costUsd: 0, modelCalls: 1 },
        usageByAgent: {},
        durationMs: 2_000,
      },
    };
    expect(
      formatEvent(event, { color: false }).endsWith(
        '(whole: 2097152 bytes, nats object get troupe-values-demo task-1.write.1.output)',
      ),
    ).toBe(true);
  });
});

describe('formatEvent: the flow', () => {
  const envelope = {
    ts: '2026-11-29T12:00:02.000Z',
    pipeline: 'demo',
    taskId: 'task-1',
    traceparent: '00-228501cfd9ddc401a594405b2e1a9608-214fbd37f4df7231-01',
  };

  it('says a step that failed failed, with its code', () => {
    const event: TroupeEvent = {
      ...envelope,
      id: 'task-1:step.completed:task-1.docs.1',
      kind: 'step.completed',
      from: 'writer',
      to: 'workflow',
      data: {
        step: 'docs',
        agent: 'writer',
        round: 1,
        stepId: 'task-1.docs.1',
        ok: false,
        output: '',
        error: { code: 'server_error', message: 'the docs site is down' },
        usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
        turns: 1,
        durationMs: 90,
      },
    };
    expect(
      formatEvent(event, { color: false }).endsWith(
        'docs · 0→0 tok · FAILED (server_error): the docs site is down',
      ),
    ).toBe(true);
  });

  it('names the join a hand-off follows, and why a router chose its target', () => {
    const handoff: TroupeEvent = {
      ...envelope,
      id: 'task-1:agent.handoff:wrap',
      kind: 'agent.handoff',
      from: 'each',
      to: 'wrapper',
      data: { step: 'wrap', round: 1, reason: 'next', join: 'each' },
    };
    expect(formatEvent(handoff, { color: false }).endsWith('wrap — after the join of each')).toBe(true);
    const route: TroupeEvent = {
      ...envelope,
      id: 'task-1:route.chosen:pick',
      kind: 'route.chosen',
      from: 'router',
      data: {
        step: 'pick',
        round: 1,
        value: 'build',
        case: 'build',
        target: 'build',
        agent: 'router',
        reason: 'a feature',
      },
    };
    expect(formatEvent(route, { color: false }).endsWith('pick → build (build): a feature')).toBe(true);
  });
});

describe('formatEvent: a person steering a task', () => {
  const event = (kind: string, data: Record<string, unknown>, from = 'user'): TroupeEvent =>
    ({
      id: `task-1:${kind}`,
      ts: '2026-11-29T12:00:01.250Z',
      pipeline: 'demo',
      taskId: 'task-1',
      kind,
      from,
      traceparent: '00-228501cfd9ddc401a594405b2e1a9608-214fbd37f4df7231-01',
      data,
    }) as TroupeEvent;
  const summary = (e: TroupeEvent) =>
    formatEvent(e, { color: false }).replace(/^.*?task\.\w+ +|^.*?agent\.told +/, '');

  it('says where a pause held the task, who paused it and why; and for how long when it resumes', () => {
    expect(summary(event('task.paused', { state: 'plan', round: 1, by: 'ana', reason: 'wrong\nAPI' }))).toBe(
      'in step plan, round 1 by ana: wrong API',
    );
    expect(
      summary(
        event('task.resumed', {
          state: 'plan',
          round: 1,
          deliveries: 1,
          after: 'pause',
          by: 'ana',
          pausedMs: 42_400,
        }),
      ),
    ).toBe('in step plan, round 1, after a pause of 42 s (by ana)');
    expect(summary(event('task.resumed', { state: 'plan', round: 1, deliveries: 2 }))).toBe(
      'in step plan, round 1 (delivery 2)',
    );
  });

  it('shows a told message with who told it, and which agent read it before which turn', () => {
    expect(summary(event('task.told', { messageId: 'm-1', text: 'use the v2 API', by: 'ana' }))).toBe(
      'ana: use the v2 API',
    );
    const read = event(
      'agent.told',
      { agent: 'planner', stepId: 'task-1.plan.1', turn: 2, messageIds: ['m-1', 'm-2'] },
      'planner',
    );
    expect(summary(read)).toBe('planner read m-1, m-2 before turn 2');
  });
});

describe('formatEvent: an online score', () => {
  const scored = (data: Partial<Extract<TroupeEvent, { kind: 'eval.scored' }>['data']>): TroupeEvent => ({
    id: 'task-1:eval.scored',
    ts: '2026-11-29T12:00:02.000Z',
    pipeline: 'demo',
    taskId: 'task-1',
    kind: 'eval.scored',
    from: 'evals',
    to: 'demo',
    traceparent: '00-228501cfd9ddc401a594405b2e1a9608-214fbd37f4df7231-01',
    data: { status: 'completed', scores: [], pass: false, sample: 0.5, costUsd: 0, durationMs: 12, ...data },
  });
  const score = (scorer: string, value: number, pass: boolean, reason: string, costUsd?: number) => ({
    scorer,
    type: 'contains',
    value,
    threshold: 1,
    pass,
    reason,
    ...(costUsd === undefined ? {} : { costUsd }),
  });

  it('says whether it passed, each score, why a failed one failed, and what judging cost, on one line', () => {
    const line = formatEvent(
      scored({
        scores: [
          score('says done', 1, true, 'has "done"'),
          score('helpful', 0.25, false, 'the note\nis vague', 0.0021),
        ],
        costUsd: 0.0021,
      }),
      { color: false },
    );
    expect(line).toMatch(/^12:00:02\.000 {2}demo\/task-1 {2}evals → demo +eval\.scored +/);
    expect(line.endsWith('  FAIL 1/2 · says done 1.00 · helpful 0.25 ✗ the note is vague $0.0021')).toBe(
      true,
    );
  });

  it('says why the run could not be scored', () => {
    const line = formatEvent(scored({ status: 'failed', error: 'the EVENTS stream is out of reach' }), {
      color: false,
    });
    expect(
      line.endsWith('  ERROR scoring the failed task (sample 0.5): the EVENTS stream is out of reach'),
    ).toBe(true);
  });
});
