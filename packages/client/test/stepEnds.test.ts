import { emptyUsage, type TroupeEvent } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { lastStepEnds } from '../src/stepEnds.ts';

let seq = 0;
const completed = (stepId: string, output: string, ok = true): TroupeEvent =>
  ({
    id: `e${++seq}`,
    ts: '2026-12-06T00:00:00.000Z',
    pipeline: 'demo',
    taskId: 't-1',
    kind: 'step.completed',
    data: {
      step: 'plan',
      agent: 'a',
      round: 1,
      stepId,
      ok,
      output,
      usage: emptyUsage(),
      turns: 1,
      durationMs: 5,
    },
  }) as TroupeEvent;

describe('lastStepEnds', () => {
  it("gives each step run's last end, in the order of those last ends, of the ends kept", () => {
    const events = [
      completed('t-1.plan.1', 'first'),
      completed('t-1.plan.2', 'other run'),
      // The first run's final reply asked again after a crash: it ends again, last.
      completed('t-1.plan.1', 'second'),
      completed('t-1.plan.2', 'failed', false),
    ];
    const outputs = (ends: ReturnType<typeof lastStepEnds>) =>
      [...ends].map(([stepId, end]) => [stepId, end.data.output]);
    expect(outputs(lastStepEnds(events))).toEqual([
      ['t-1.plan.1', 'second'],
      ['t-1.plan.2', 'failed'],
    ]);
    expect(outputs(lastStepEnds(events, (end) => end.data.ok))).toEqual([
      ['t-1.plan.2', 'other run'],
      ['t-1.plan.1', 'second'],
    ]);
  });
});
