import { emptyUsage, type TroupeEvent } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { stepFacts } from '../../src/evals/scorers/runFacts.ts';

let seq = 0;
const ended = (
  step: string,
  round: number,
  output: string,
  durationMs: number,
  decision?: 'approve' | 'reject',
): TroupeEvent =>
  ({
    id: `e${++seq}`,
    ts: '2026-12-06T00:00:00.000Z',
    pipeline: 'notes',
    taskId: 't1',
    traceparent: '',
    kind: 'step.completed',
    data: {
      step,
      agent: 'a',
      round,
      stepId: `t1.${step}.${round}`,
      ok: true,
      output,
      usage: emptyUsage(),
      turns: 1,
      durationMs,
      ...(decision ? { verdict: { decision, feedback: '' } } : {}),
    },
  }) as TroupeEvent;

describe('stepFacts', () => {
  it("adds up a step's runs, and counts a run that ended twice (asked again after a crash) once, by its last end", () => {
    const facts = stepFacts({
      events: [
        ended('write', 1, 'first draft', 300),
        ended('review', 1, 'no', 100, 'reject'),
        ended('write', 2, 'draft', 200),
        ended('review', 2, 'no', 100, 'reject'),
        // The coordinator crashed before its checkpoint: round 2's review is asked again, and ends otherwise.
        ended('review', 2, 'yes', 40, 'approve'),
      ],
    });
    expect(facts).toEqual({
      write: { rounds: 2, ok: true, verdict: null, output: 'draft', durationMs: 500 },
      review: { rounds: 2, ok: true, verdict: 'approve', output: 'yes', durationMs: 140 },
    });
  });
});
