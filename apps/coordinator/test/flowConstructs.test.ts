import { describe, expect, it } from 'vitest';
import { PipelineConfig } from '../src/config/pipelineSchema.ts';
import { activeSteps } from '../src/workflow/compileFlow.ts';
import {
  failedReply,
  ofKind,
  pipelineOf,
  type Reply,
  run,
  type Script,
  text,
  verdict,
} from './support/runFlow.ts';

/** A pipeline of these steps, each agent named after what it does. */
const flow = (steps: unknown[]) =>
  pipelineOf(['planner', 'fixer', 'builder', 'writer', 'tester', 'closer'], steps);

/** A reply held until the test lets it go, and whether its step was stopped meanwhile. */
function held() {
  let release: (reply: Reply) => void = () => {};
  const state = { asked: false, aborted: false };
  const reply = (_request: unknown, _call: number, signal: AbortSignal) => {
    state.asked = true;
    signal.addEventListener('abort', () => (state.aborted = true), { once: true });
    return new Promise<Reply>((resolve) => (release = resolve));
  };
  return { reply, state, release: (r: Reply) => release(r) };
}

describe('when: a step that runs only sometimes', () => {
  const plan =
    (category: string): Script['planner'] =>
    () =>
      text(JSON.stringify({ category, risky: false }));
  const steps = [
    { id: 'plan', kind: 'agent', agent: 'planner' },
    { id: 'fix', kind: 'agent', agent: 'fixer', when: 'steps.plan.output.category == "bug"' },
    { id: 'close', kind: 'agent', agent: 'closer' },
  ];

  it('runs the step when its condition is true', async () => {
    const { output, calls, events } = await run(flow(steps), {
      planner: plan('bug'),
      fixer: () => text('fixed'),
      closer: () => text('closed'),
    });
    expect(output.status).toBe('completed');
    expect(calls('fixer')).toHaveLength(1);
    expect(ofKind(events, 'step.skipped')).toEqual([]);
  });

  it('skips it when false, says so, and goes on to the next step', async () => {
    const { output, calls, events } = await run(flow(steps), {
      planner: plan('feature'),
      closer: (request) => text(`closed after ${request.context.map((c) => c.step).join(',')}`),
    });
    expect(output).toMatchObject({ status: 'completed', output: 'closed after plan' });
    expect(calls('fixer')).toEqual([]);
    expect(ofKind(events, 'step.skipped')).toEqual([
      expect.objectContaining({
        data: { step: 'fix', round: 1, when: 'steps.plan.output.category == "bug"' },
      }),
    ]);
  });

  it('fails the task with condition_failed when its condition cannot be evaluated', async () => {
    const { output, calls } = await run(flow(steps), { planner: () => text('not json at all') });
    expect(output).toMatchObject({ status: 'failed', failure: { reason: 'condition_failed', step: 'fix' } });
    expect(output.failure?.message).toContain('step fix: its condition could not be evaluated');
    expect(calls('closer')).toEqual([]);
  });

  it('can skip the first step of the flow', async () => {
    const { output, calls } = await run(
      flow([
        { id: 'plan', kind: 'agent', agent: 'planner', when: 'has(input.plan) && input.plan' },
        { id: 'close', kind: 'agent', agent: 'closer' },
      ]),
      { closer: () => text('closed') },
    );
    expect(output).toMatchObject({ status: 'completed', output: 'closed' });
    expect(calls('planner')).toEqual([]);
  });
});

describe('kind: route', () => {
  const steps = (extra: Record<string, unknown> = {}) => [
    { id: 'plan', kind: 'agent', agent: 'planner' },
    {
      id: 'triage',
      kind: 'route',
      on: 'steps.plan.output.category',
      cases: { bug: 'fix', feature: 'build', nothing: 'end' },
      ...extra,
    },
    { id: 'fix', kind: 'agent', agent: 'fixer' },
    { id: 'build', kind: 'agent', agent: 'builder' },
    { id: 'close', kind: 'agent', agent: 'closer' },
  ];
  const script = (category: string): Script => ({
    planner: () => text(JSON.stringify({ category })),
    fixer: () => text('fixed'),
    builder: () => text('built'),
    closer: () => text('closed'),
  });

  it('goes to the case the value matches, skipping the steps in between, and says so', async () => {
    const { output, calls, events } = await run(flow(steps()), script('feature'));
    expect(output.status).toBe('completed');
    expect(calls('fixer')).toEqual([]);
    expect(calls('builder')).toHaveLength(1);
    expect(calls('closer')).toHaveLength(1);
    expect(ofKind(events, 'route.chosen')).toEqual([
      expect.objectContaining({
        data: { step: 'triage', round: 1, value: 'feature', case: 'feature', target: 'build' },
      }),
    ]);
  });

  it('jumps past the steps below a step that names its next', async () => {
    const config = flow(steps().map((s) => (s.id === 'fix' ? { ...s, next: 'close' } : s)));
    const { output, calls } = await run(config, script('bug'));
    expect(output).toMatchObject({ status: 'completed', output: 'closed' });
    expect(calls('fixer')).toHaveLength(1);
    expect(calls('builder')).toEqual([]);
  });

  it('ends the flow on end, with the last work as the output', async () => {
    const { output, calls } = await run(flow(steps()), script('nothing'));
    expect(output).toMatchObject({ status: 'completed', output: JSON.stringify({ category: 'nothing' }) });
    expect(calls('closer')).toEqual([]);
  });

  it('takes the default when no case matches, and fails without one', async () => {
    const taken = await run(flow(steps({ default: 'close' })), script('question'));
    expect(taken.calls('closer')).toHaveLength(1);
    expect(ofKind(taken.events, 'route.chosen')[0]?.data).toEqual({
      step: 'triage',
      round: 1,
      value: 'question',
      target: 'close',
    });
    const none = await run(flow(steps()), script('question'));
    expect(none.output).toMatchObject({
      status: 'failed',
      failure: { reason: 'condition_failed', step: 'triage' },
    });
    expect(none.output.failure?.message).toContain('"question", which matches none of its cases');
  });
});

describe('kind: route with a router agent', () => {
  const config = () =>
    PipelineConfig.parse({
      version: 1,
      name: 'demo',
      models: { scripted: { provider: 'scripted', script: './demo.script.yaml' } },
      defaults: { model: 'scripted' },
      agents: {
        router: { instructions: 'Route it.' },
        fixer: { instructions: 'Fix.' },
        builder: { instructions: 'Build.' },
      },
      flow: [
        { id: 'pick', kind: 'route', agent: 'router', targets: { fix: 'bugs', build: 'features' } },
        { id: 'fix', kind: 'agent', agent: 'fixer', next: 'end' },
        { id: 'build', kind: 'agent', agent: 'builder' },
      ],
    });

  it('asks the agent to pick a target through a schema naming only the targets, and goes there', async () => {
    const choice = { target: 'build', reason: 'it is new' };
    const { output, calls, events } = await run(config(), {
      router: () => ({ ...text(JSON.stringify(choice)), structured: choice }),
      builder: () => text('built'),
    });
    expect(output).toMatchObject({ status: 'completed', output: 'built' });
    const [asked] = calls('router');
    expect(asked?.instructions).toContain('- fix: bugs\n- build: features');
    expect(asked?.output?.schema).toMatchObject({ properties: { target: { enum: ['fix', 'build'] } } });
    expect(calls('fixer')).toEqual([]);
    expect(ofKind(events, 'route.chosen')[0]?.data).toMatchObject({
      target: 'build',
      agent: 'router',
      reason: 'it is new',
    });
  });
});

describe('a rework loop around a route', () => {
  it('forgets what the rejected round produced: the task ends with this round’s work, conditions see only it', async () => {
    const config = PipelineConfig.parse({
      version: 1,
      name: 'demo',
      models: { scripted: { provider: 'scripted', script: './demo.script.yaml' } },
      defaults: { model: 'scripted' },
      agents: Object.fromEntries(
        ['planner', 'fixer', 'builder', 'reviewer', 'closer'].map((a) => [a, { instructions: a }]),
      ),
      flow: [
        { id: 'plan', kind: 'agent', agent: 'planner' },
        { id: 'pick', kind: 'route', on: 'steps.plan.output', cases: { a: 'fix', b: 'build' } },
        { id: 'fix', kind: 'agent', agent: 'fixer', next: 'review' },
        { id: 'build', kind: 'agent', agent: 'builder' },
        { id: 'review', kind: 'review', agent: 'reviewer', onReject: 'plan', maxRounds: 2 },
        { id: 'close', kind: 'agent', agent: 'closer', when: '!has(steps.build)' },
      ],
    });
    const { output, calls } = await run(config, {
      planner: (_request, call) => text(call === 0 ? 'b' : 'a'),
      builder: () => text('BUILT-round1'),
      fixer: () => text('FIXED'),
      reviewer: (_request, call) => (call === 0 ? verdict('reject', 'wrong way') : verdict('approve', 'ok')),
      closer: (request) => text(`closed after ${request.context.map((c) => c.step).join(',')}`),
    });
    // Round 2 took the other case: the build of round 1 is no output of this task, nor seen by the reviewer.
    expect(calls('reviewer')[1]?.context.map((c) => c.step)).toEqual(['plan', 'pick', 'fix', 'review']);
    expect(output).toMatchObject({ status: 'completed', output: 'closed after plan,pick,fix,review' });
  });
});

describe('kind: parallel', () => {
  const steps = (extra: Record<string, unknown> = {}) => [
    { id: 'plan', kind: 'agent', agent: 'planner' },
    {
      id: 'both',
      kind: 'parallel',
      branches: {
        docs: [{ id: 'write', kind: 'agent', agent: 'writer' }],
        tests: [
          { id: 'test', kind: 'agent', agent: 'tester' },
          { id: 'build', kind: 'agent', agent: 'builder' },
        ],
      },
      ...extra,
    },
    { id: 'close', kind: 'agent', agent: 'closer' },
  ];

  it('runs the branches at once, and gives the next step their outputs by branch id', async () => {
    const writer = held();
    const tester = held();
    const started = run(flow(steps()), {
      planner: () => text('plan'),
      writer: writer.reply,
      tester: tester.reply,
      builder: (request) => text(`built on ${request.context.map((c) => c.step).join(',')}`),
      closer: (request) => text(request.context.map((c) => `${c.step}=${c.output}`).join(' | ')),
    });
    // Both branches have asked their agents before either has answered.
    await expect.poll(() => writer.state.asked && tester.state.asked).toBe(true);
    tester.release(text('tested'));
    writer.release(text(JSON.stringify({ pages: 2 })));
    const { output, events } = await started;
    expect(output.status).toBe('completed');
    // A branch's steps see the steps before the parallel step and the ones before them in the branch.
    expect(JSON.parse(output.output.split(' | ')[1]?.replace('both=', '') ?? '')).toEqual({
      docs: { pages: 2 },
      tests: 'built on plan,test',
    });
    expect(ofKind(events, 'branches.joined')).toEqual([
      expect.objectContaining({
        data: {
          step: 'both',
          round: 1,
          join: 'all',
          ok: true,
          branches: { docs: { status: 'completed' }, tests: { status: 'completed' } },
        },
      }),
    ]);
  });

  it('join all: fails at the first failed branch, stopping the others', async () => {
    const writer = held();
    const { output, calls } = await run(flow(steps()), {
      planner: () => text('plan'),
      writer: writer.reply,
      tester: () => failedReply('the tests do not compile'),
    });
    expect(output).toMatchObject({ status: 'failed', failure: { reason: 'step_failed', step: 'test' } });
    expect(output.failure?.message).toContain('branch tests of both: step test (tester) failed');
    expect(writer.state.aborted).toBe(true);
    expect(calls('builder')).toEqual([]);
    expect(calls('closer')).toEqual([]);
  });

  it('join first: the first branch to succeed wins and the others are stopped', async () => {
    const tester = held();
    const { output, events } = await run(flow(steps({ join: 'first' })), {
      planner: () => text('plan'),
      writer: () => text('written'),
      tester: tester.reply,
      closer: (request) => text(request.context.find((c) => c.step === 'both')?.output ?? ''),
    });
    expect(JSON.parse(output.output)).toEqual({ docs: 'written' });
    expect(tester.state.aborted).toBe(true);
    expect(ofKind(events, 'branches.joined')[0]?.data).toMatchObject({
      ok: true,
      branches: { docs: { status: 'completed' }, tests: { status: 'stopped' } },
    });
  });

  it('join any: waits for every branch and goes on when one succeeded, with the failure in the output', async () => {
    const { output } = await run(flow(steps({ join: 'any' })), {
      planner: () => text('plan'),
      writer: () => failedReply('no ink'),
      tester: () => text('tested'),
      builder: () => text('built'),
      closer: (request) => text(request.context.find((c) => c.step === 'both')?.output ?? ''),
    });
    expect(JSON.parse(output.output)).toEqual({
      docs: { error: 'step write (writer) failed: no ink' },
      tests: 'built',
    });
  });

  it('fails when no branch succeeded, unless onError: continue', async () => {
    const script: Script = {
      planner: () => text('plan'),
      writer: () => failedReply('no ink'),
      tester: () => failedReply('no tests'),
      closer: () => text('closed anyway'),
    };
    const failed = await run(flow(steps({ join: 'any' })), script);
    expect(failed.output).toMatchObject({ status: 'failed', failure: { step: 'both' } });
    expect(failed.output.failure?.message).toContain(
      'no branch succeeded; docs: step write (writer) failed: no ink',
    );
    const going = await run(flow(steps({ onError: 'continue' })), script);
    expect(going.output).toMatchObject({ status: 'completed', output: 'closed anyway' });
  });

  it('names the branches at work in its state', () => {
    expect(activeSteps({ both: { docs: 'write', tests: '_done' } })).toEqual(['write']);
    expect(activeSteps({ both: { docs: 'write', tests: 'build' } })).toEqual(['write', 'build']);
    expect(activeSteps('close')).toEqual(['close']);
  });
});

describe('kind: human', () => {
  const steps = (extra: Record<string, unknown> = {}) => [
    { id: 'plan', kind: 'agent', agent: 'planner' },
    { id: 'confirm', kind: 'human', prompt: 'Ship it?', timeout: 60, ...extra },
    { id: 'build', kind: 'agent', agent: 'builder' },
    { id: 'close', kind: 'agent', agent: 'closer' },
  ];
  const script: Script = {
    planner: () => text('the plan'),
    builder: (request) =>
      text(`built after ${request.context.map((c) => `${c.step}=${c.output}`).join(', ')}`),
    closer: () => text('closed'),
  };
  const timedOut = () => ({
    ok: false as const,
    code: 'timeout' as const,
    message: 'nobody answered',
    durationMs: 60_000,
  });

  it('asks a person with its prompt and gives the answer to the steps after it', async () => {
    const { output, asked, calls, events } = await run(flow(steps()), script, {
      people: () => ({ ok: true, answer: 'yes, ship', durationMs: 5 }),
    });
    expect(output.status).toBe('completed');
    expect(asked).toEqual([
      expect.objectContaining({
        step: 'confirm',
        stepId: 'task-1.confirm.1',
        prompt: 'Ship it?',
        timeoutMs: 60_000,
      }),
    ]);
    expect(calls('builder')[0]?.context.map((c) => [c.step, c.output])).toContainEqual([
      'confirm',
      'yes, ship',
    ]);
    expect(ofKind(events, 'step.completed').find((e) => e.data.step === 'confirm')?.data).toMatchObject({
      agent: 'human',
      ok: true,
      output: 'yes, ship',
    });
  });

  it('on a timeout fails the task, goes on, or jumps, as onTimeout says', async () => {
    const failed = await run(flow(steps()), script, { people: timedOut });
    expect(failed.output).toMatchObject({
      status: 'failed',
      failure: { reason: 'approval_timeout', step: 'confirm' },
    });
    expect(failed.calls('builder')).toEqual([]);
    const going = await run(flow(steps({ onTimeout: 'continue' })), script, { people: timedOut });
    expect(going.output.status).toBe('completed');
    expect(going.calls('builder')[0]?.context.map((c) => c.step)).toEqual(['plan']);
    const jumping = await run(flow(steps({ onTimeout: 'close' })), script, { people: timedOut });
    expect(jumping.output).toMatchObject({ status: 'completed', output: 'closed' });
    expect(jumping.calls('builder')).toEqual([]);
  });

  it('fails with invalid_output when the answers kept missing its schema', async () => {
    const { output } = await run(flow(steps({ answer: { type: 'boolean' } })), script, {
      people: () => ({
        ok: false,
        code: 'invalid_answer',
        message: '3 answers in a row did not match',
        durationMs: 1,
      }),
    });
    expect(output).toMatchObject({
      status: 'failed',
      failure: { reason: 'invalid_output', step: 'confirm' },
    });
  });

  it('waits in a checkpoint of its own, and asks again from it', async () => {
    let answer: (output: { ok: true; answer: string; durationMs: number }) => void = () => {};
    const checkpoints: unknown[] = [];
    const first = run(flow(steps()), script, {
      people: () => new Promise((resolve) => (answer = resolve)),
      onCheckpoint: (s) => checkpoints.push(s),
    });
    await expect.poll(() => (checkpoints.at(-1) as { value?: unknown } | undefined)?.value).toBe('confirm');
    const waiting = checkpoints.at(-1);
    answer({ ok: true, answer: 'first run', durationMs: 1 });
    await first;
    const resumed = await run(flow(steps()), script, {
      snapshot: waiting,
      people: () => ({ ok: true, answer: 'resumed', durationMs: 1 }),
    });
    expect(resumed.asked.map((a) => a.stepId)).toEqual(['task-1.confirm.1']);
    expect(resumed.requests.map((r) => r.request.step)).toEqual(['build', 'close']);
  });
});

describe('retry and onError', () => {
  const steps = (build: Record<string, unknown>, close: Record<string, unknown> = {}) => [
    { id: 'plan', kind: 'agent', agent: 'planner' },
    { id: 'build', kind: 'agent', agent: 'builder', ...build },
    { id: 'test', kind: 'agent', agent: 'tester' },
    { id: 'close', kind: 'agent', agent: 'closer', ...close },
  ];
  const flaky =
    (failures: number): Script['builder'] =>
    (_request, call) =>
      call < failures ? failedReply(`attempt ${call + 1} broke`) : text('built');

  it('runs a failed step again, afresh, with a step id of its own, until it succeeds', async () => {
    const { output, calls, events } = await run(flow(steps({ retry: { max: 2, backoff: 0 } })), {
      planner: () => text('plan'),
      builder: flaky(2),
      tester: () => text('tested'),
      closer: () => text('closed'),
    });
    expect(output.status).toBe('completed');
    expect(calls('builder').map((r) => r.stepId)).toEqual([
      'task-1.build.1',
      'task-1.build.1-r1',
      'task-1.build.1-r2',
    ]);
    expect(
      ofKind(events, 'step.completed')
        .filter((e) => e.data.step === 'build')
        .map((e) => e.data.ok),
    ).toEqual([false, false, true]);
  });

  it('after its retries, goes on as onError says, the failure readable as steps.<id>.error', async () => {
    const script: Script = {
      planner: () => text('plan'),
      builder: flaky(5),
      tester: () => text('tested'),
      closer: () => text('closed'),
    };
    const failing = await run(flow(steps({ retry: { max: 1, backoff: 0 } })), script);
    expect(failing.output).toMatchObject({ status: 'failed', failure: { step: 'build' } });
    expect(failing.calls('builder')).toHaveLength(2);
    const going = await run(
      flow(steps({ retry: { max: 1, backoff: 0 }, onError: 'continue' }, { when: 'has(steps.build.error)' })),
      script,
    );
    expect(going.output).toMatchObject({ status: 'completed', output: 'closed' });
    expect(going.calls('tester')).toHaveLength(1);
    const jumping = await run(flow(steps({ onError: 'close' })), script);
    expect(jumping.output).toMatchObject({ status: 'completed', output: 'closed' });
    expect(jumping.calls('tester')).toEqual([]);
  });

  it('sends a step its own budget, the tightest limit winning and named', async () => {
    const { calls } = await run(flow(steps({ budget: { maxTokens: 500, maxModelCalls: 3 } })), {
      planner: () => text('plan'),
      builder: () => text('built'),
      tester: () => text('tested'),
      closer: () => text('closed'),
    });
    expect(calls('builder')[0]?.budget).toEqual({
      tokens: 500,
      modelCalls: 3,
      sources: {
        tokens: "step build's budget of 500 tokens",
        modelCalls: "step build's budget of 3 model calls",
      },
    });
    expect(calls('tester')[0]?.budget).toBeUndefined();
  });

  it('does not retry a step that ran out of budget', async () => {
    const { output, calls } = await run(flow(steps({ retry: { max: 3, backoff: 0 } })), {
      planner: () => text('plan'),
      builder: () => ({
        ...failedReply('out of tokens'),
        error: { code: 'budget_exceeded', message: 'out of tokens' },
      }),
    });
    expect(output).toMatchObject({ status: 'failed', failure: { reason: 'budget_exceeded' } });
    expect(calls('builder')).toHaveLength(1);
  });

  it('waits out its backoff in a checkpoint of its own, and retries from it', async () => {
    const checkpoints: unknown[] = [];
    const script: Script = {
      planner: () => text('plan'),
      builder: flaky(1),
      tester: () => text('t'),
      closer: () => text('c'),
    };
    await run(flow(steps({ retry: { max: 1, backoff: 0.05 } })), script, {
      onCheckpoint: (s) => checkpoints.push(s),
    });
    const backingOff = checkpoints.find((c) => (c as { value: unknown }).value === 'retry:build');
    expect(backingOff).toBeDefined();
    const resumed = await run(
      flow(steps({ retry: { max: 1, backoff: 0.05 } })),
      { ...script, builder: () => text('built') },
      {
        snapshot: backingOff,
      },
    );
    expect(resumed.requests.map((r) => r.request.stepId)).toEqual([
      'task-1.build.1-r1',
      'task-1.test.1',
      'task-1.close.1',
    ]);
    expect(resumed.output.status).toBe('completed');
  });
});

describe('kind: pipeline', () => {
  const steps = (extra: Record<string, unknown> = {}) => [
    { id: 'plan', kind: 'agent', agent: 'planner' },
    { id: 'sub', kind: 'pipeline', pipeline: 'outline', ...extra },
    { id: 'close', kind: 'agent', agent: 'closer' },
  ];
  const script: Script = {
    planner: () => text(JSON.stringify({ parts: 2 })),
    closer: (request) => text(request.context.map((c) => `${c.step}=${c.output}`).join(' | ')),
  };
  const spent = { inputTokens: 7, outputTokens: 3, cachedTokens: 0, costUsd: 0.5, modelCalls: 2 };

  it('submits a sub-task with an id made from the step, linked to its parent, and takes its result and usage', async () => {
    const { output, submitted } = await run(flow(steps({ goal: 'Outline it' })), script, {
      pipelines: () => ({ ok: true, output: 'the outline', usage: spent, durationMs: 3 }),
    });
    expect(submitted).toEqual([
      {
        pipeline: 'outline',
        timeoutMs: 600_000,
        task: {
          id: expect.stringMatching(/^task-1-sub-1-[A-Za-z0-9]{6}$/),
          goal: 'Outline it',
          input: { context: { plan: { parts: 2 } } },
          parent: {
            taskId: 'task-1',
            pipeline: 'demo',
            step: 'sub',
            depth: 1,
            traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
          },
        },
      },
    ]);
    expect(output.output).toBe('plan={"parts":2} | sub=the outline');
    expect(output.usage.modelCalls).toBe(2 + 2);
    expect(output.usage.costUsd).toBe(0.5);
  });

  it('fails with the sub-task, unless onError says otherwise', async () => {
    const failedSub = () => ({
      ok: false as const,
      code: 'step_failed',
      message: 'task task-1-sub-1 failed (step_failed): no outline',
      usage: spent,
      durationMs: 3,
    });
    const failed = await run(flow(steps()), script, { pipelines: failedSub });
    expect(failed.output).toMatchObject({ status: 'failed', failure: { step: 'sub' } });
    expect(failed.output.failure?.message).toBe(
      'step sub (pipeline outline): task task-1-sub-1 failed (step_failed): no outline',
    );
    const going = await run(flow(steps({ onError: 'continue' })), script, { pipelines: failedSub });
    expect(going.output).toMatchObject({ status: 'completed', output: 'plan={"parts":2}' });
  });
});

describe('restoring from a checkpoint', () => {
  const steps = [
    { id: 'plan', kind: 'agent', agent: 'planner' },
    { id: 'skip-me', kind: 'agent', agent: 'fixer', when: 'steps.plan.output.category == "bug"' },
    {
      id: 'both',
      kind: 'parallel',
      branches: {
        docs: [{ id: 'write', kind: 'agent', agent: 'writer' }],
        tests: [
          { id: 'test', kind: 'agent', agent: 'tester' },
          { id: 'build', kind: 'agent', agent: 'builder' },
        ],
      },
    },
    {
      id: 'triage',
      kind: 'route',
      on: 'steps.plan.output.category',
      cases: { feature: 'close' },
      default: 'end',
    },
    { id: 'close', kind: 'agent', agent: 'closer' },
  ];
  const script: Script = {
    planner: () => text(JSON.stringify({ category: 'feature' })),
    writer: () => text('written'),
    tester: () => text('tested'),
    builder: () => text('built'),
    closer: (request) => text(request.context.map((c) => c.step).join(',')),
  };

  it('finishes the same from every checkpoint a run made, running only what had not finished', async () => {
    const checkpoints: unknown[] = [];
    const whole = await run(flow(steps), script, { onCheckpoint: (s) => checkpoints.push(s) });
    expect(whole.output).toMatchObject({ status: 'completed', output: 'plan,both,triage' });
    expect(checkpoints.length).toBeGreaterThan(5);
    for (const snapshot of checkpoints) {
      const value = (snapshot as { value: unknown }).value;
      // A checkpoint is only ever in a step that waits, or at the end: transient states never are.
      expect(JSON.stringify(value)).not.toContain('when:');
      expect(JSON.stringify(value)).not.toContain('triage');
      const resumed = await run(flow(steps), script, { snapshot });
      expect(resumed.output).toEqual(whole.output);
      // What had finished before the checkpoint is not asked again.
      const finished = (snapshot as { context: { latest: Record<string, unknown> } }).context.latest;
      for (const request of resumed.requests) expect(finished).not.toHaveProperty(request.request.step);
    }
  });

  it('resumes a parallel step with one branch finished and one running, running only the one', async () => {
    const tester = held();
    const checkpoints: unknown[] = [];
    const first = run(
      flow(steps),
      { ...script, tester: tester.reply },
      { onCheckpoint: (s) => checkpoints.push(s) },
    );
    await expect.poll(() => tester.state.asked).toBe(true);
    await expect
      .poll(() => JSON.stringify((checkpoints.at(-1) as { value: unknown } | undefined)?.value))
      .toBe(JSON.stringify({ both: { docs: '_done', tests: 'test' } }));
    const midway = checkpoints.at(-1);
    tester.release(text('tested'));
    await first;
    const resumed = await run(flow(steps), script, { snapshot: midway });
    expect(resumed.requests.map((r) => r.request.step)).toEqual(['test', 'build', 'close']);
    expect(resumed.output).toMatchObject({ status: 'completed', output: 'plan,both,triage' });
  });
});
