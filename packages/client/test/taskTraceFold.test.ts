import { emptyUsage, type TroupeEvent } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { buildTaskTrace } from '../src/taskTrace.ts';

let seq = 0;
const event = (second: number, kind: string, data: Record<string, unknown>): TroupeEvent =>
  ({
    id: `e${++seq}`,
    ts: `2026-12-06T00:00:${String(second).padStart(2, '0')}.000Z`,
    pipeline: 'demo',
    taskId: 't-1',
    kind,
    data,
  }) as TroupeEvent;
const ran = (second: number, step: string) => [
  event(second, 'step.started', { step, agent: 'a', round: 1, stepId: `t-1.${step}.1` }),
  event(second, 'step.completed', {
    step,
    agent: 'a',
    round: 1,
    stepId: `t-1.${step}.1`,
    ok: true,
    output: step,
    usage: emptyUsage(),
    turns: 1,
    durationMs: 5,
  }),
];
const picked = (second: number, target: string, reason: string) =>
  event(second, 'route.chosen', { step: 'pick', round: 1, value: target, target, agent: 'router', reason });

describe('a route in the trace', () => {
  it("shows a router's later pick in its place: asked again after a crash, it picked another target", () => {
    const trace = buildTaskTrace('t-1', [
      ...ran(1, 'pick'),
      picked(2, 'build', 'a feature'),
      // The coordinator crashed before its checkpoint: the router is asked again and picks otherwise.
      ...ran(3, 'pick'),
      picked(4, 'docs', 'a text'),
      ...ran(5, 'docs'),
    ]);
    expect(trace.flow).toEqual([
      { kind: 'step', stepId: 't-1.pick.1' },
      {
        kind: 'route',
        at: '2026-12-06T00:00:04.000Z',
        step: 'pick',
        round: 1,
        value: 'docs',
        target: 'docs',
        agent: 'router',
        reason: 'a text',
      },
      { kind: 'step', stepId: 't-1.docs.1' },
    ]);
  });

  it('keeps the first of the same pick said again by a resumed run', () => {
    const trace = buildTaskTrace('t-1', [
      ...ran(1, 'pick'),
      picked(2, 'build', 'first'),
      picked(3, 'build', 'again'),
    ]);
    const routes = trace.flow.filter((node) => node.kind === 'route');
    expect(routes).toMatchObject([{ at: '2026-12-06T00:00:02.000Z', target: 'build', reason: 'first' }]);
  });
});
