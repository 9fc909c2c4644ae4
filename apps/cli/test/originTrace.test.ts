import { buildTaskTrace } from '@troupe/client';
import type { EventData, EventKind, TaskOriginRef, TroupeEvent } from '@troupe/protocol';
import { EventFactory } from '@troupe/runtime';
import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { formatTrace } from '../src/format/formatTrace.ts';

const factory = new EventFactory({ now: () => Date.UTC(2026, 0, 1, 12, 0, 0) });
const scope = {
  pipeline: 'demo',
  taskId: 't2',
  traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
};
const event = <K extends EventKind>(kind: K, data: z.input<(typeof EventData)[K]>): TroupeEvent =>
  factory.make(kind, scope, data);
const spent = { inputTokens: 10, outputTokens: 2, cachedTokens: 0, costUsd: 0, modelCalls: 1 };
const nothing = { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 };

/** A task made from `origin`: its plan reused, its build run, as `troupe trace` reads it. */
function traceOf(origin: TaskOriginRef): string[] {
  const events = [
    event('task.accepted', { goal: 'ship it', origin }),
    event('step.started', { step: 'plan', agent: 'planner', round: 1, stepId: 't2.plan.1' }),
    event('step.completed', {
      step: 'plan',
      agent: 'planner',
      round: 1,
      stepId: 't2.plan.1',
      ok: true,
      output: 'a better plan',
      reused: true,
      usage: nothing,
      turns: 0,
      durationMs: 0,
    }),
    event('step.started', { step: 'build', agent: 'builder', round: 1, stepId: 't2.build.1' }),
    event('step.completed', {
      step: 'build',
      agent: 'builder',
      round: 1,
      stepId: 't2.build.1',
      ok: true,
      output: 'built',
      usage: spent,
      turns: 1,
      durationMs: 5,
    }),
  ];
  return formatTrace(buildTaskTrace('t2', events), { color: false }).split('\n');
}

describe("troupe trace's origin line", () => {
  it('names a fork, the step it is at, what it edited and who asked for it', () => {
    const lines = traceOf({
      taskId: 't1',
      kind: 'fork',
      step: 'build',
      edited: ['input', 'steps.plan.output'],
      by: 'ann',
    });
    expect(lines).toContain('origin: fork of task t1 at build, edited input, steps.plan.output by ann');
    expect(lines.find((l) => l.includes('plan · planner'))).toContain(
      "reused (its origin's output; nothing ran)",
    );
    expect(lines.find((l) => l.includes('build · builder'))).not.toContain('reused');
  });

  it('names a fork that edited nothing it knows of, and one nobody is named for', () => {
    expect(traceOf({ taskId: 't1', kind: 'fork', step: 'build' })).toContain(
      'origin: fork of task t1 at build',
    );
    expect(traceOf({ taskId: 't1', kind: 'fork', step: 'build', edited: [] })).toContain(
      'origin: fork of task t1 at build',
    );
  });

  it('names a restart by the step it runs from, never with edits', () => {
    const lines = traceOf({ taskId: 't1', kind: 'restart', step: 'build', by: 'bo' });
    expect(lines).toContain('origin: restart of task t1 from build by bo');
    expect(lines.filter((l) => l.startsWith('origin: '))).toHaveLength(1);
  });

  it("says when it runs on the pipeline's newest version rather than its origin's", () => {
    expect(traceOf({ taskId: 't1', kind: 'restart', step: 'build', newest: true, by: 'bo' })).toContain(
      "origin: restart of task t1 from build, on the pipeline's newest version by bo",
    );
    expect(traceOf({ taskId: 't1', kind: 'fork', step: 'build', edited: ['input'], newest: true })).toContain(
      "origin: fork of task t1 at build, edited input, on the pipeline's newest version",
    );
  });
});
