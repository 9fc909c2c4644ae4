import type { EvalCase, EventData, EventKind, TroupeEvent } from '@troupe/protocol';
import { EventFactory } from '@troupe/runtime';
import type { z } from 'zod';
import { caseRunOf } from '../../src/evals/caseRun.ts';
import type { CaseRun } from '../../src/evals/evalTypes.ts';

/** How a test run went: each tool call (refused with `code`), each review round's verdict, how it ended. */
export interface RunShape {
  taskId?: string;
  output?: string;
  ended?: 'completed' | 'failed' | 'cancelled';
  tools?: readonly (string | { tool: string; code: string })[];
  /** The review step's verdicts, one a round. */
  reviews?: readonly ('approve' | 'reject')[];
  approvalsAsked?: number;
  costUsd?: number;
  /** Input tokens the task's model calls wrote to the prompt cache; none when absent. */
  cacheWriteTokens?: number;
  durationMs?: number;
}

const usage = (costUsd: number, cacheWriteTokens?: number) => ({
  inputTokens: 120,
  outputTokens: 40,
  cachedTokens: 0,
  ...(cacheWriteTokens === undefined ? {} : { cacheWriteTokens }),
  costUsd,
  modelCalls: 2,
});

/** The events a run of the writer-and-reviewer flow publishes, made by the runtime's EventFactory. */
export function eventsOf(shape: RunShape): TroupeEvent[] {
  let now = Date.UTC(2026, 0, 1);
  const factory = new EventFactory({ now: () => now++ });
  const scope = { pipeline: 'notes', taskId: shape.taskId ?? 't1', traceparent: '' };
  const make = <K extends EventKind>(kind: K, data: z.input<(typeof EventData)[K]>): TroupeEvent =>
    factory.make(kind, scope, data);
  const write = { agent: 'writer', stepId: `${scope.taskId}.write.1` };
  const events: TroupeEvent[] = [
    make('task.accepted', { goal: 'write the release note' }),
    make('step.started', { step: 'write', agent: 'writer', round: 1, stepId: write.stepId }),
  ];
  for (const [index, call] of (shape.tools ?? []).entries()) {
    const { tool, code } = typeof call === 'string' ? { tool: call, code: undefined } : call;
    const ids = { ...write, turn: 1, index, callId: `c${index}` };
    events.push(make('tool.call', { ...ids, tool, arguments: '{}' }));
    if (index < (shape.approvalsAsked ?? 0)) {
      events.push(
        make('approval.requested', {
          ...write,
          approvalId: `a${index}`,
          callId: `c${index}`,
          tool,
          arguments: '{}',
          reason: 'ask rule',
          expiresAt: '2026-01-01T00:05:00.000Z',
        }),
      );
    }
    events.push(
      make('tool.result', {
        ...ids,
        tool,
        ok: code === undefined,
        decision: code === 'denied' ? 'deny' : 'allow',
        output: code === undefined ? 'done' : `${tool} refused`,
        ...(code === undefined ? {} : { error: { code, message: `${tool} refused` } }),
        durationMs: 1,
      }),
    );
  }
  events.push(stepCompleted(make, 'write', 'writer', 1, 'draft', undefined));
  for (const [i, decision] of (shape.reviews ?? []).entries()) {
    const stepId = `${scope.taskId}.review.${i + 1}`;
    events.push(make('step.started', { step: 'review', agent: 'reviewer', round: i + 1, stepId }));
    events.push(stepCompleted(make, 'review', 'reviewer', i + 1, decision, decision));
  }
  const cost = shape.costUsd ?? 0.01;
  const durationMs = shape.durationMs ?? 1500;
  const ended = shape.ended ?? 'completed';
  if (ended === 'completed') {
    events.push(
      make('task.completed', {
        output: shape.output ?? 'done',
        rounds: Math.max(1, shape.reviews?.length ?? 1),
        usage: usage(cost, shape.cacheWriteTokens),
        usageByAgent: {},
        durationMs,
      }),
    );
  } else if (ended === 'failed') {
    events.push(
      make('task.failed', { reason: 'step_failed', message: 'write failed', usage: usage(cost), durationMs }),
    );
  } else {
    events.push(make('task.cancelled', { reason: 'by a person', usage: usage(cost) }));
  }
  return events;
}

function stepCompleted(
  make: <K extends EventKind>(kind: K, data: z.input<(typeof EventData)[K]>) => TroupeEvent,
  step: string,
  agent: string,
  round: number,
  output: string,
  decision: 'approve' | 'reject' | undefined,
): TroupeEvent {
  return make('step.completed', {
    step,
    agent,
    round,
    stepId: `t.${step}.${round}`,
    ok: true,
    output,
    ...(decision === undefined ? {} : { verdict: { decision, feedback: '' } }),
    usage: usage(0.005),
    turns: 1,
    durationMs: 200,
  });
}

export const noteCase: EvalCase = {
  id: 'note-1',
  goal: 'write the release note',
  expected: 'Release 1.2: faster start',
  metadata: { team: 'docs' },
};

/** A run of `noteCase` (or `evalCase`) shaped as asked. */
export const runOf = (shape: RunShape, evalCase: EvalCase = noteCase): CaseRun =>
  caseRunOf(evalCase, eventsOf(shape));

/** A pipeline file of a writer and a reviewer on `model`, with `models` as YAML under `models:`. */
export const pipelineText = (models: string, model: string) => `version: 1
name: notes
models:
${models}
defaults:
  model: ${model}
agents:
  writer:
    instructions: Write the release note.
  reviewer:
    instructions: Review the note.
flow:
  - id: write
    kind: agent
    agent: writer
  - id: review
    kind: review
    agent: reviewer
    onReject: write
    maxRounds: 2
`;
