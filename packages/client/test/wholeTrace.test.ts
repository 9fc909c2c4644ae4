import type { ValueRef } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { type TaskTrace, wholeTrace } from '../src/taskTrace.ts';

const ref = (name: string): ValueRef => ({
  bucket: 'troupe-values-demo',
  name,
  bytes: 9,
  sha256: 'a'.repeat(64),
});
const totals = {
  inputTokens: 0,
  outputTokens: 0,
  cachedTokens: 0,
  costUsd: 0,
  modelCalls: 0,
  toolCalls: 1,
  approvals: 0,
  questions: 0,
  retries: 0,
  fallbacks: 0,
  errors: 0,
};

const traced = (outputRef: ValueRef): TaskTrace => ({
  taskId: 't-1',
  pipeline: 'demo',
  status: 'completed',
  resumed: 0,
  output: 'out…[cut]',
  outputRef,
  steps: [
    {
      stepId: 't-1.a.1',
      step: 'a',
      agent: 'worker',
      round: 1,
      entries: [
        {
          kind: 'tool',
          callId: 'c-1',
          tool: 'fetch',
          arguments: '{}',
          at: '2026-12-06T00:00:00.000Z',
          result: {
            ok: true,
            decision: 'allow',
            output: 'res…[cut]',
            outputRef: ref('t-1.a.1.1.0.result'),
            durationMs: 1,
            journaled: false,
          },
        },
      ],
    },
  ],
  flow: [{ kind: 'step', stepId: 't-1.a.1' }],
  totals,
});

describe('wholeTrace', () => {
  it('reads the task output and each large tool result back whole', async () => {
    const stored = new Map([
      ['t-1.b.1.output', 'the whole output'],
      ['t-1.a.1.1.0.result', 'the whole result'],
    ]);
    const whole = await wholeTrace(traced(ref('t-1.b.1.output')), async (r) => stored.get(r.name) ?? '');

    expect(whole.output).toBe('the whole output');
    const [entry] = whole.steps[0]?.entries ?? [];
    expect(entry?.kind === 'tool' && entry.result?.output).toBe('the whole result');
  });

  it('reads the values of a sub-task nested in a pipeline step back whole too', async () => {
    const sub: TaskTrace = { ...traced(ref('sub.b.1.output')), taskId: 'sub' };
    const parent = traced(ref('t-1.b.1.output'));
    const nested: TaskTrace = {
      ...parent,
      steps: parent.steps.map((step) => ({
        ...step,
        subTask: { taskId: 'sub', pipeline: 'inner', trace: sub },
      })),
    };
    const stored = new Map([
      ['t-1.b.1.output', 'the whole output'],
      ['sub.b.1.output', 'the sub-task output'],
      ['t-1.a.1.1.0.result', 'the whole result'],
    ]);
    const whole = await wholeTrace(nested, async (r) => stored.get(r.name) ?? '');

    expect(whole.steps[0]?.subTask?.trace?.output).toBe('the sub-task output');
    expect(whole.steps[0]?.subTask).toMatchObject({ taskId: 'sub', pipeline: 'inner' });
  });

  it('keeps the preview, which says where the whole was, when a value cannot be read', async () => {
    const whole = await wholeTrace(traced(ref('t-1.b.1.output')), async () => {
      throw new Error('value t-1.b.1.output is not stored');
    });

    expect(whole.output).toBe('out…[cut]');
    expect(whole.outputRef?.name).toBe('t-1.b.1.output');
  });
});
