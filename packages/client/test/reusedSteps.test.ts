import { emptyUsage, type TroupeEvent } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { reuseKey, reusePlan } from '../src/reusedSteps.ts';

let seq = 0;
const event = (kind: string, data: Record<string, unknown>): TroupeEvent =>
  ({
    id: `e${++seq}`,
    ts: '2026-12-06T00:00:00.000Z',
    pipeline: 'demo',
    taskId: 't-1',
    kind,
    data,
  }) as TroupeEvent;
const started = (step: string, stepId: string, extra: Record<string, unknown> = {}) =>
  event('step.started', { step, agent: 'a', round: 1, stepId, ...extra });
const completed = (step: string, stepId: string, output: string, extra: Record<string, unknown> = {}) =>
  event('step.completed', {
    step,
    agent: 'a',
    round: 1,
    stepId,
    ok: true,
    output,
    usage: emptyUsage(),
    turns: 1,
    durationMs: 5,
    ...extra,
  });

describe('reuseKey', () => {
  it('names a step run without its task id and retry, keeping its round and item', () => {
    expect(reuseKey('t-1', 't-1.plan.1')).toBe('plan.1');
    expect(reuseKey('t-1', 't-1.plan.2-r3')).toBe('plan.2');
    expect(reuseKey('t-1', 't-1.each.1-r1.i4')).toBe('each.1.i4');
  });
});

describe('reusePlan', () => {
  const history = [
    started('plan', 't-1.plan.1'),
    completed('plan', 't-1.plan.1', 'the plan'),
    started('review', 't-1.review.1'),
    completed('review', 't-1.review.1', 'fine', { verdict: { approved: true, feedback: 'ok' } }),
    started('sub', 't-1.sub.1', { subTask: { taskId: 's-1', pipeline: 'other' } }),
    completed('sub', 't-1.sub.1', 'sub output'),
    started('test', 't-1.test.1'),
    event('step.completed', {
      step: 'test',
      agent: 'a',
      round: 1,
      stepId: 't-1.test.1',
      ok: false,
      output: '',
      usage: emptyUsage(),
      turns: 1,
      durationMs: 1,
    }),
  ];

  it('reuses every step that completed well before the step first started: a verdict with its output, a sub-task too', () => {
    const plan = reusePlan(history, { taskId: 't-1', step: 'test' });
    expect(plan).toEqual({
      ok: true,
      steps: {
        'plan.1': { step: 'plan', agent: 'a', output: 'the plan' },
        'review.1': {
          step: 'review',
          agent: 'a',
          output: 'fine',
          verdict: { approved: true, feedback: 'ok' },
        },
        'sub.1': {
          step: 'sub',
          agent: 'a',
          output: 'sub output',
          subTask: { taskId: 's-1', pipeline: 'other' },
        },
      },
    });
  });

  it('does not reuse the step itself, nor a step that completed after it started', () => {
    const plan = reusePlan(history, { taskId: 't-1', step: 'review' });
    expect(plan.ok && Object.keys(plan.steps)).toEqual(['plan.1']);
  });

  it('starts a parallel or foreach step where the first step inside it started', () => {
    const inside = [
      started('plan', 't-1.plan.1'),
      completed('plan', 't-1.plan.1', 'p'),
      started('x', 't-1.x.1.i0', { within: [{ step: 'each', item: 0 }] }),
      completed('x', 't-1.x.1.i0', 'x0'),
    ];
    const plan = reusePlan(inside, { taskId: 't-1', step: 'each' });
    expect(plan.ok && Object.keys(plan.steps)).toEqual(['plan.1']);
  });

  it('from a step inside a parallel branch: a sibling step that ended before it started is reused, one at work is not', () => {
    const within = { within: [{ step: 'fan' }] };
    const branches = [
      started('plan', 't-1.plan.1'),
      completed('plan', 't-1.plan.1', 'p'),
      started('left', 't-1.left.1', within),
      started('ask', 't-1.ask.1', { ...within, agent: 'human' }),
      completed('ask', 't-1.ask.1', 'yes', { ...within, agent: 'human', turns: 0 }),
      started('right', 't-1.right.1', within),
      completed('left', 't-1.left.1', 'l', within),
      event('step.completed', {
        step: 'right',
        agent: 'a',
        round: 1,
        stepId: 't-1.right.1',
        ok: false,
        output: '',
        usage: emptyUsage(),
        turns: 1,
        durationMs: 1,
      }),
    ];
    const keys = (step: string) => {
      const plan = reusePlan(branches, { taskId: 't-1', step });
      return plan.ok ? Object.keys(plan.steps) : plan.message;
    };
    expect(keys('right')).toEqual(['plan.1', 'ask.1']);
    expect(keys('ask')).toEqual(['plan.1']);
    expect(keys('left')).toEqual(['plan.1']);
    expect(keys('fan')).toEqual(['plan.1']);
  });

  it('reuses the retry of a step that succeeded, under the key of its first run, and no run that failed', () => {
    const retried = [
      started('build', 't-1.build.1'),
      event('step.completed', {
        step: 'build',
        agent: 'a',
        round: 1,
        stepId: 't-1.build.1',
        ok: false,
        output: '',
        usage: emptyUsage(),
        turns: 1,
        durationMs: 1,
      }),
      started('build', 't-1.build.1-r1'),
      completed('build', 't-1.build.1-r1', 'built'),
      // A branch of a parallel step whose join is `any` failed, and the task went on without it.
      started('test', 't-1.test.1-r2', { within: [{ step: 'checks' }] }),
      event('step.completed', {
        step: 'test',
        agent: 'a',
        round: 1,
        stepId: 't-1.test.1-r2',
        ok: false,
        output: '',
        usage: emptyUsage(),
        turns: 1,
        durationMs: 1,
      }),
      started('deploy', 't-1.deploy.1'),
    ];
    const plan = reusePlan(retried, { taskId: 't-1', step: 'deploy' });
    expect(plan).toEqual({ ok: true, steps: { 'build.1': { step: 'build', agent: 'a', output: 'built' } } });
  });

  it("reuses a step run's last end: its final reply asked again after a crash ended it again, after the next step started", () => {
    const review = { verdict: { decision: 'approve', feedback: 'ok' } };
    const twice = [
      started('plan', 't-1.plan.1'),
      completed('plan', 't-1.plan.1', 'first plan'),
      started('review', 't-1.review.1'),
      completed('review', 't-1.review.1', 'no', {
        verdict: { decision: 'reject', feedback: '' },
      }),
      started('code', 't-1.code.1'),
      // The coordinator crashed before its checkpoint: the runs are asked again, and end otherwise.
      completed('plan', 't-1.plan.1', 'second plan'),
      completed('review', 't-1.review.1', 'yes', review),
      completed('code', 't-1.code.1', 'code'),
    ];
    const plan = reusePlan(twice, { taskId: 't-1', step: 'code' });
    expect(plan).toEqual({
      ok: true,
      steps: {
        'plan.1': { step: 'plan', agent: 'a', output: 'second plan' },
        'review.1': { step: 'review', agent: 'a', output: 'yes', ...review },
      },
    });
  });

  it('sets the output of a reused step, dropping the whole the original stored', () => {
    const ref = { bucket: 'b', name: 'n', bytes: 1, sha256: 'a'.repeat(64) };
    const events = [started('plan', 't-1.plan.1'), completed('plan', 't-1.plan.1', 'p…', { outputRef: ref })];
    const plan = reusePlan([...events, started('code', 't-1.code.1')], {
      taskId: 't-1',
      step: 'code',
      set: { plan: 'edited plan' },
    });
    expect(plan).toEqual({
      ok: true,
      steps: { 'plan.1': { step: 'plan', agent: 'a', output: 'edited plan', edited: true } },
    });
  });

  it('refuses a step that never started, naming the ones that did', () => {
    const plan = reusePlan(history, { taskId: 't-1', step: 'deploy' });
    expect(plan).toEqual({
      ok: false,
      problem: 'not_started',
      message: 'step "deploy" never started in task t-1; its steps that started: plan, review, sub, test',
      started: ['plan', 'review', 'sub', 'test'],
    });
  });

  it('refuses a set for a step that is not reused', () => {
    const plan = reusePlan(history, { taskId: 't-1', step: 'review', set: { test: 'x' } });
    expect(plan.ok).toBe(false);
    expect(!plan.ok && plan.message).toMatch(/cannot set the output of step "test".*reused: plan/);
  });

  it("refuses a set for a human step: a person's answer is given by a person, not written by whoever forks", () => {
    const gated = [
      started('plan', 't-1.plan.1'),
      completed('plan', 't-1.plan.1', 'p'),
      started('approve', 't-1.approve.1', { agent: 'human' }),
      completed('approve', 't-1.approve.1', 'no', { agent: 'human', turns: 0 }),
      started('deploy', 't-1.deploy.1'),
    ];
    const plan = reusePlan(gated, { taskId: 't-1', step: 'deploy', set: { approve: 'yes', plan: 'q' } });
    expect(plan).toMatchObject({ ok: false, problem: 'answered_by_person' });
    expect(!plan.ok && plan.message).toMatch(/step "approve" is a person's answer.*fork at "approve"/);
  });

  it('asks a person again whose answer came after what a fork edits, so no approval carries over to what they never saw', () => {
    const gated = [
      started('plan', 't-1.plan.1'),
      completed('plan', 't-1.plan.1', 'p'),
      started('approve', 't-1.approve.1', { agent: 'human' }),
      completed('approve', 't-1.approve.1', 'yes', { agent: 'human', turns: 0 }),
      started('notes', 't-1.notes.1'),
      completed('notes', 't-1.notes.1', 'n'),
      started('deploy', 't-1.deploy.1'),
    ];
    const keys = (plan: ReturnType<typeof reusePlan>) => (plan.ok ? Object.keys(plan.steps) : plan.message);
    const at = { taskId: 't-1', step: 'deploy' };
    // A new input: every answer was given about the old one.
    expect(keys(reusePlan(gated, { ...at, edited: ['input'] }))).toEqual(['plan.1', 'notes.1']);
    // An edited plan: the approval after it goes; an edit after the approval leaves it.
    expect(keys(reusePlan(gated, { ...at, set: { plan: 'q' }, edited: ['steps.plan.output'] }))).toEqual([
      'plan.1',
      'notes.1',
    ]);
    expect(keys(reusePlan(gated, { ...at, set: { notes: 'm' } }))).toEqual([
      'plan.1',
      'approve.1',
      'notes.1',
    ]);
    // A restart, or a fork with no edits, reuses the answer as given.
    expect(keys(reusePlan(gated, at))).toEqual(['plan.1', 'approve.1', 'notes.1']);
  });
});
