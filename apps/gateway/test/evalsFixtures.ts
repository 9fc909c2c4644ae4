import type { CaseResult, Experiment, Score, TroupeEvent } from '@troupe/protocol';

/** Experiments as `troupe eval run` stores them, built by hand for the gateway's eval tests. */

const usage = (costUsd: number) => ({
  inputTokens: 10,
  outputTokens: 5,
  cachedTokens: 0,
  costUsd,
  modelCalls: 1,
});

const score = (scorer: string, pass: boolean): Score => ({
  scorer,
  type: 'contains',
  value: pass ? 1 : 0,
  threshold: 1,
  pass,
  reason: pass ? `the output contains ${scorer}` : `the output lacks ${scorer}`,
});

/** A replayed run's events: accepted, one step of `writer`, completed with `output`. */
export function runEvents(pipeline: string, taskId: string, output: string): TroupeEvent[] {
  const at = (s: number) => new Date(Date.UTC(2026, 11, 1, 9, 0, s)).toISOString();
  const envelope = (n: number) => ({
    id: `${taskId}-e${n}`,
    ts: at(n),
    pipeline,
    taskId,
    traceparent: '00-0123456789abcdef0123456789abcdef-0123456789abcdef-01',
  });
  const step = { step: 'write', agent: 'writer', round: 1, stepId: 'write.1' };
  return [
    { ...envelope(0), kind: 'task.accepted', data: { goal: `goal of ${taskId}` } },
    { ...envelope(1), kind: 'step.started', data: step },
    {
      ...envelope(2),
      kind: 'step.completed',
      data: { ...step, ok: true, output, usage: usage(0.01), turns: 1, durationMs: 1_000 },
    },
    {
      ...envelope(3),
      kind: 'task.completed',
      data: { output, rounds: 1, usage: usage(0.01), usageByAgent: {}, durationMs: 3_000 },
    },
  ] as TroupeEvent[];
}

/** A case's result: passed when `pass`, else failed its `mentions-tool` scorer. */
export function caseResult(
  pipeline: string,
  caseId: string,
  pass: boolean,
  options: { events?: boolean; taskId?: string; costUsd?: number } = {},
): CaseResult {
  const taskId = options.taskId ?? `replay-${caseId}-${pass ? 'p' : 'f'}`;
  const output = pass ? 'notes: wrote with write_file' : 'notes';
  return {
    caseId,
    status: pass ? 'passed' : 'failed',
    taskId,
    taskStatus: 'completed',
    output,
    scores: [score('notes', true), score('mentions-tool', pass)],
    usage: usage(options.costUsd ?? 0.01),
    durationMs: 3_000,
    tools: pass ? ['write_file'] : [],
    steps: ['write'],
    ...(options.events === false ? {} : { events: runEvents(pipeline, taskId, output) }),
  };
}

/** An experiment of `cases` on `pipeline`, its totals summed from them. */
export function experiment(
  id: string,
  pipeline: string,
  cases: CaseResult[],
  startedAt = new Date().toISOString(),
): Experiment {
  const passed = cases.filter((c) => c.status === 'passed').length;
  const means = cases.map((c) => c.scores.reduce((s, x) => s + x.value, 0) / Math.max(1, c.scores.length));
  return {
    id,
    dataset: { name: 'notes', version: 1 },
    pipeline: {
      name: pipeline,
      file: `${pipeline}.yaml`,
      hash: `hash-of-${id}`,
      models: { scripted: { provider: 'scripted', model: 'scripted' } },
    },
    mode: 'replay',
    startedAt,
    durationMs: 5_000,
    cases,
    totals: {
      cases: cases.length,
      passed,
      failed: cases.length - passed,
      errored: 0,
      skipped: 0,
      meanScore: means.reduce((s, x) => s + x, 0) / Math.max(1, means.length),
      costUsd: cases.reduce((s, c) => s + c.usage.costUsd, 0),
      judgeCostUsd: 0,
      p50Ms: 3_000,
      p90Ms: 3_000,
    },
  };
}

/** A task's online score, as a coordinator publishes it after the task's end: `mentions-tool` passed or not. */
export function scoredEvent(pipeline: string, taskId: string, pass: boolean): TroupeEvent {
  return {
    id: `${taskId}.eval.scored`,
    ts: new Date().toISOString(),
    pipeline,
    taskId,
    traceparent: '00-0123456789abcdef0123456789abcdef-0123456789abcdef-01',
    kind: 'eval.scored',
    data: {
      status: 'completed',
      scores: [score('notes', true), score('mentions-tool', pass)],
      pass,
      sample: 1,
      costUsd: 0,
      durationMs: 4,
    },
  };
}
