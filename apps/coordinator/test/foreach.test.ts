import { describe, expect, it } from 'vitest';
import { createActor, type Snapshot } from 'xstate';
import { compileFlow, stepsAtWork } from '../src/workflow/compileFlow.ts';
import { unfitItem } from '../src/workflow/steps/foreachItem.ts';
import {
  failedReply,
  ofKind,
  pipelineOf,
  type Reply,
  run,
  type Script,
  text,
  usage,
  verdict,
} from './support/runFlow.ts';

/** A pipeline of these steps, each agent named after what it does. */
const flow = (steps: unknown[], extra: Record<string, unknown> = {}) =>
  pipelineOf(['planner', 'builder', 'checker', 'closer'], steps, extra);

/** The item a request was made for, from its input. */
const itemOf = (request: { input?: Record<string, unknown> | undefined }) => request.input?.item as string;

const plan =
  (parts: unknown[]): Script['planner'] =>
  () =>
    text(JSON.stringify({ parts }));

const each = (extra: Record<string, unknown> = {}) => ({
  id: 'build-each',
  kind: 'foreach',
  items: 'steps.plan.output.parts',
  maxItems: 20,
  concurrency: 2,
  do: [
    { id: 'build', kind: 'agent', agent: 'builder' },
    { id: 'check', kind: 'agent', agent: 'checker' },
  ],
  ...extra,
});

const steps = (extra: Record<string, unknown> = {}) => [
  { id: 'plan', kind: 'agent', agent: 'planner' },
  each(extra),
  { id: 'close', kind: 'agent', agent: 'closer' },
];

/** A builder that fails item a at once and works on any other until it is stopped, noting which were. */
const aFailsOthersWait =
  (stopped: string[]): Script['builder'] =>
  (request, _call, signal) => {
    if (itemOf(request) === 'a') return failedReply('a broke');
    return new Promise<Reply>((_resolve, reject) =>
      signal.addEventListener('abort', () => {
        stopped.push(itemOf(request));
        reject(new Error('stopped'));
      }),
    );
  };

/** Replies that count how many builds run at once, each waiting a tick so they overlap. */
function counting() {
  const state = { now: 0, most: 0 };
  const reply = async (request: { input?: Record<string, unknown> | undefined }) => {
    state.now += 1;
    state.most = Math.max(state.most, state.now);
    await new Promise((resolve) => setImmediate(resolve));
    state.now -= 1;
    return text(`built ${itemOf(request)}`);
  };
  return { state, reply };
}

describe('kind: foreach', () => {
  it('runs its steps once per item, at most `concurrency` at a time, and gives the results in list order', async () => {
    const builds = counting();
    const { output, calls, events } = await run(flow(steps()), {
      planner: plan(['a', 'b', 'c', 'd', 'e']),
      builder: builds.reply,
      checker: (request) =>
        text(
          JSON.stringify({
            part: itemOf(request),
            index: request.input?.index,
            saw: request.context.map((c) => c.step),
          }),
        ),
      closer: (request) => text(request.context.find((c) => c.step === 'build-each')?.output ?? ''),
    });
    expect(output.status).toBe('completed');
    expect(calls('builder').map(itemOf).sort()).toEqual(['a', 'b', 'c', 'd', 'e']);
    expect(builds.state.most).toBe(2);
    // Each item's steps see the steps before the foreach and the item's own earlier steps.
    expect(JSON.parse(output.output)).toEqual(
      ['a', 'b', 'c', 'd', 'e'].map((part, index) => ({ part, index, saw: ['plan', 'build'] })),
    );
    // Every item's run of a step is a step of its own.
    const ids = calls('builder').map((r) => r.stepId);
    expect(new Set(ids).size).toBe(5);
    expect(ids).toContain('task-1.build.1.i3');
    const started = ofKind(events, 'step.started').filter((e) => e.data.step === 'check');
    expect(started.map((e) => e.data.item).sort()).toEqual([0, 1, 2, 3, 4]);
    expect(ofKind(events, 'items.joined')).toEqual([
      expect.objectContaining({
        data: { step: 'build-each', round: 1, items: 5, completed: 5, failed: [], stopped: 0, ok: true },
      }),
    ]);
    // What the items spent counts in the task's usage: 1 plan + 10 item steps + 1 close, 10 tokens each.
    expect(output.usage.inputTokens).toBe(120);
    expect(output.usageByAgent.builder?.modelCalls).toBe(5);
  });

  it('reads the item in conditions as input.item', async () => {
    const { calls, events } = await run(
      flow(
        steps({
          do: [
            { id: 'build', kind: 'agent', agent: 'builder' },
            { id: 'check', kind: 'agent', agent: 'checker', when: 'input.item.risky' },
          ],
        }),
      ),
      {
        planner: plan([
          { name: 'a', risky: true },
          { name: 'b', risky: false },
        ]),
        builder: () => text('built'),
        checker: () => text('checked'),
        closer: () => text('closed'),
      },
    );
    expect(calls('checker').map((r) => (r.input?.item as { name: string } | undefined)?.name)).toEqual(['a']);
    expect(ofKind(events, 'step.skipped')).toEqual([
      expect.objectContaining({ data: expect.objectContaining({ step: 'check', item: 1 }) }),
    ]);
  });

  it('goes straight on with an empty list', async () => {
    const { output, calls } = await run(flow(steps()), {
      planner: plan([]),
      closer: (request) => text(request.context.find((c) => c.step === 'build-each')?.output ?? ''),
    });
    expect(output).toMatchObject({ status: 'completed', output: '[]' });
    expect(calls('builder')).toEqual([]);
  });

  it('fails without running anything when the list is longer than maxItems, or not a list', async () => {
    const tooMany = await run(flow(steps({ maxItems: 3 })), { planner: plan([1, 2, 3, 4]) });
    expect(tooMany.output.failure).toEqual({
      reason: 'step_failed',
      message:
        'foreach step build-each: steps.plan.output.parts gave 4 items, more than its maxItems of 3; none was run',
      step: 'build-each',
    });
    expect(tooMany.calls('builder')).toEqual([]);
    const notAList = await run(flow(steps()), { planner: () => text(JSON.stringify({ parts: 'abc' })) });
    expect(notAList.output.failure).toMatchObject({ reason: 'condition_failed', step: 'build-each' });
    expect(notAList.output.failure?.message).toContain('"abc", not a list');
  });

  it('fails fast by default: the first failed item stops the others and starts no more', async () => {
    const stopped: string[] = [];
    const { output, calls, events } = await run(flow(steps({ concurrency: 2 })), {
      planner: plan(['a', 'b', 'c', 'd']),
      // b is still at work when a fails: it is stopped.
      builder: aFailsOthersWait(stopped),
    });
    expect(output.status).toBe('failed');
    expect(output.failure).toEqual({
      reason: 'step_failed',
      message: 'item 0 of build-each: step build (builder) failed: a broke',
      step: 'build-each',
    });
    expect(calls('builder').map(itemOf)).toEqual(['a', 'b']);
    await expect.poll(() => stopped).toEqual(['b']);
    expect(ofKind(events, 'items.joined')).toEqual([
      expect.objectContaining({
        data: expect.objectContaining({
          completed: 0,
          failed: [{ index: 0, message: 'step build (builder) failed: a broke' }],
          stopped: 3,
          ok: false,
        }),
      }),
    ]);
  });

  it('stops the items still at work when it fails fast and the flow goes on elsewhere', async () => {
    const stopped: string[] = [];
    const { output, calls } = await run(flow(steps({ onError: 'close' })), {
      planner: plan(['a', 'b', 'c']),
      builder: aFailsOthersWait(stopped),
      closer: () => text(`closed, stopped so far: ${stopped.join(',')}`),
    });
    expect(output).toMatchObject({ status: 'completed', output: 'closed, stopped so far: b' });
    expect(calls('builder').map(itemOf)).toEqual(['a', 'b']);
  });

  it('counts what a stopped item had spent in the task’s usage', async () => {
    let bBuilt: () => void = () => {};
    const built = new Promise<void>((resolve) => (bBuilt = resolve));
    const { output } = await run(flow(steps({ onError: 'close' })), {
      planner: plan(['a', 'b']),
      builder: async (request) => {
        if (itemOf(request) === 'b') {
          bBuilt();
          return text('built b', usage(1000));
        }
        // a fails once b's build has replied and b is at its check.
        await built;
        await new Promise((resolve) => setImmediate(resolve));
        return failedReply('a broke');
      },
      checker: () => new Promise<Reply>(() => {}),
      closer: () => text('closed'),
    });
    expect(output.status).toBe('completed');
    // The plan, b's build (1000), a's failed build and the close: b's build counts though b was stopped.
    expect(output.usage.inputTokens).toBe(10 + 1000 + 1 + 10);
    expect(output.usageByAgent.builder?.inputTokens).toBe(1001);
  });

  it('without failFast runs every item and fails at the end; with onError: continue it goes on with the errors', async () => {
    const script: Script = {
      planner: plan(['a', 'b', 'c']),
      builder: (request) =>
        itemOf(request) === 'b' ? failedReply('b broke') : text(`built ${itemOf(request)}`),
      checker: (request) => text(`checked ${itemOf(request)}`),
      closer: (request) => text(request.context.find((c) => c.step === 'build-each')?.output ?? ''),
    };
    const strict = await run(flow(steps({ failFast: false })), script);
    expect(strict.calls('builder').map(itemOf).sort()).toEqual(['a', 'b', 'c']);
    expect(strict.output.failure).toEqual({
      reason: 'step_failed',
      message: 'foreach step build-each: 1 of 3 items failed; item 1: step build (builder) failed: b broke',
      step: 'build-each',
    });
    const lenient = await run(flow(steps({ onError: 'continue' })), script);
    expect(lenient.output.status).toBe('completed');
    expect(JSON.parse(lenient.output.output)).toEqual([
      'checked a',
      { error: 'step build (builder) failed: b broke' },
      'checked c',
    ]);
  });

  it('counts what earlier items and steps spent in an item’s task budget', async () => {
    const { calls } = await run(flow(steps({ concurrency: 1 }), { budget: { maxTokens: 1_000 } }), {
      planner: () => text(JSON.stringify({ parts: ['a', 'b'] }), usage(100)),
      builder: () => text('built', usage(100)),
      checker: () => text('checked', usage(100)),
      closer: () => text('closed'),
    });
    // Item b starts after the plan (101 tokens) and item a (202): 1000 - 303 tokens are left.
    const second = calls('builder')[1];
    expect(second?.budget?.tokens).toBe(697);
    expect(second?.budget?.sources.tokens).toBe('the task budget of 1000 tokens');
  });

  it('is at work in the steps its items are in, and asks people about their item', async () => {
    let workflow: { getSnapshot(): Parameters<typeof stepsAtWork>[0] } | undefined;
    let at: string[] = [];
    let questions: string[] = [];
    const { output } = await run(
      flow([
        { id: 'plan', kind: 'agent', agent: 'planner' },
        {
          id: 'ask-each',
          kind: 'foreach',
          items: 'steps.plan.output.parts',
          maxItems: 3,
          do: [{ id: 'vote', kind: 'human', prompt: 'Agree?' }],
        },
      ]),
      { planner: plan(['ana', 'bo']) },
      {
        onStart: (actor) => (workflow = actor as unknown as typeof workflow),
        people: async (input) => {
          questions = [...questions, input.prompt];
          // Both items wait on a person: the task's workflow is at work in neither step of its own.
          if (questions.length === 2 && workflow) at = stepsAtWork(workflow.getSnapshot());
          return { ok: true, answer: 'yes', durationMs: 1 };
        },
      },
    );
    expect(output.status).toBe('completed');
    expect(questions.sort()).toEqual([
      'Agree?\n\n(item 0 of ask-each: "ana")',
      'Agree?\n\n(item 1 of ask-each: "bo")',
    ]);
    expect(at).toEqual(['vote', 'vote']);
  });

  it('stops its items when the task is cancelled', async () => {
    const aborted: string[] = [];
    let cancel = () => {};
    const { output } = await run(
      flow(steps()),
      {
        planner: plan(['a', 'b', 'c']),
        builder: (request, _call, signal) => {
          // Both items at work: cancel the task.
          if (itemOf(request) === 'b') setImmediate(cancel);
          return new Promise<Reply>((_resolve, reject) =>
            signal.addEventListener('abort', () => {
              aborted.push(itemOf(request));
              reject(new Error('stopped'));
            }),
          );
        },
      },
      { onStart: (actor) => (cancel = () => actor.send({ type: 'cancel', reason: 'enough' })) },
    );
    expect(output).toMatchObject({ status: 'cancelled', cancelReason: 'enough' });
    await expect.poll(() => aborted.sort()).toEqual(['a', 'b']);
  });
});

describe('a foreach step resumed from a checkpoint', () => {
  const script: Script = {
    planner: plan(['a', 'b', 'c', 'd']),
    builder: (request) => text(`built ${itemOf(request)}`),
    checker: (request) => text(`checked ${itemOf(request)}`),
    closer: (request) => text(request.context.find((c) => c.step === 'build-each')?.output ?? ''),
  };
  const expected = JSON.stringify(['checked a', 'checked b', 'checked c', 'checked d']);

  it('finishes the same from every checkpoint a run made, asking nothing again that had finished', async () => {
    const checkpoints: unknown[] = [];
    const whole = await run(flow(steps()), script, { onCheckpoint: (s) => checkpoints.push(s) });
    expect(whole.output).toMatchObject({ status: 'completed', output: expected });
    // Each item's progress is a checkpoint of its own: more than one per step of the task.
    expect(checkpoints.length).toBeGreaterThan(12);
    for (const snapshot of checkpoints) {
      const resumed = await run(flow(steps()), script, { snapshot });
      expect(resumed.output.output).toBe(expected);
      expect(resumed.output.usage).toEqual(whole.output.usage);
      // An item's step that had replied by the checkpoint is not asked again.
      const replied = new Set(JSON.stringify(snapshot).match(/built [a-d]/g) ?? []);
      for (const request of resumed.calls('builder'))
        expect(replied).not.toContain(`built ${itemOf(request)}`);
    }
  });

  it('continues each item where it was: one done, one between its steps, one at its first, one not started', async () => {
    const checkpoints: unknown[] = [];
    const asked: string[] = [];
    const never = () => new Promise<Reply>(() => {});
    let stop = () => {};
    // a finishes; b waits on its check and c on its build; d waits for a free place (concurrency 2).
    const first = run(
      flow(steps({ concurrency: 2 })),
      {
        ...script,
        builder: (request) => {
          asked.push(`build:${itemOf(request)}`);
          return itemOf(request) === 'c' ? never() : text(`built ${itemOf(request)}`);
        },
        checker: (request) => {
          asked.push(`check:${itemOf(request)}`);
          return itemOf(request) === 'b' ? never() : text(`checked ${itemOf(request)}`);
        },
      },
      {
        onCheckpoint: (s) => checkpoints.push(s),
        onStart: (actor) => (stop = () => actor.send({ type: 'cancel' })),
      },
    );
    await expect.poll(() => asked.includes('check:b') && asked.includes('build:c')).toBe(true);
    const midway = checkpoints.at(-1);
    stop();
    await first;
    const resumed = await run(flow(steps({ concurrency: 2 })), script, { snapshot: midway });
    expect(resumed.output).toMatchObject({ status: 'completed', output: expected });
    expect(resumed.requests.map((r) => `${r.request.step}:${itemOf(r.request) ?? ''}`).sort()).toEqual(
      ['build:c', 'build:d', 'check:b', 'check:c', 'check:d', 'close:'].sort(),
    );
  });

  it('drops its items from the checkpoint once it has ended: their results are its output', async () => {
    const checkpoints: unknown[] = [];
    await run(flow(steps()), script, { onCheckpoint: (s) => checkpoints.push(s) });
    const after = checkpoints.filter((s) => (s as { value: unknown }).value === 'close');
    expect(after.length).toBeGreaterThan(0);
    for (const snapshot of after) {
      const context = (snapshot as { context: { foreach?: object; latest: Record<string, unknown> } })
        .context;
      expect(context.foreach).toEqual({});
      expect(context.latest).toHaveProperty('build-each');
    }
  });

  it('finds an item that no longer fits the pipeline as loaded now', async () => {
    const checkpoints: unknown[] = [];
    const never = () => new Promise<Reply>(() => {});
    let stop = () => {};
    const first = run(
      flow(steps()),
      { ...script, checker: never },
      {
        onCheckpoint: (s) => checkpoints.push(s),
        onStart: (actor) => (stop = () => actor.send({ type: 'cancel' })),
      },
    );
    await expect.poll(() => JSON.stringify(checkpoints.at(-1) ?? {}).includes('"check"')).toBe(true);
    const midway = checkpoints.at(-1) as Snapshot<unknown>;
    stop();
    await first;
    const same = createActor(compileFlow(flow(steps())), {
      input: { taskId: 't', pipeline: 'demo', goal: 'g', traceparent: '' },
      snapshot: midway,
    });
    expect(unfitItem(same.getSnapshot())).toBeUndefined();
    // The item's step `check` was renamed since the checkpoint.
    const renamed = steps({
      do: [
        { id: 'build', kind: 'agent', agent: 'builder' },
        { id: 'verify', kind: 'agent', agent: 'checker' },
      ],
    });
    const changed = createActor(compileFlow(flow(renamed)), {
      input: { taskId: 't', pipeline: 'demo', goal: 'g', traceparent: '' },
      snapshot: midway,
    });
    expect(changed.getSnapshot().status).toBe('active');
    expect(String((unfitItem(changed.getSnapshot()) as { error: Error }).error)).toContain('check');
  });
});

describe('a foreach step reworked after a review', () => {
  it('gives each item’s last step its own result of the rejected round, and the feedback', async () => {
    const seen: string[] = [];
    await run(
      flow([
        { id: 'plan', kind: 'agent', agent: 'planner' },
        each({ do: [{ id: 'build', kind: 'agent', agent: 'builder' }] }),
        { id: 'check', kind: 'review', agent: 'checker', onReject: 'build-each', maxRounds: 2 },
      ]),
      {
        planner: plan(['a', 'b']),
        builder: (request) => {
          seen.push(
            `${itemOf(request)}@${request.round}: ${request.context.map((c) => `${c.output}@${c.round}`).join(', ')} ${request.feedback ?? ''}`,
          );
          return text(`built ${itemOf(request)}`);
        },
        checker: (request) =>
          request.round === 1 ? verdict('reject', 'smaller parts') : verdict('approve', 'ok'),
      },
    );
    expect(seen.filter((line) => line.includes('@2:')).sort()).toEqual([
      'a@2: {"parts":["a","b"]}@1, built a@1 smaller parts',
      'b@2: {"parts":["a","b"]}@1, built b@1 smaller parts',
    ]);
  });
});

describe('kind: foreach, where its events place each step', () => {
  it('names the item and its place in `within`, inside a parallel step too, and hands on from the join', async () => {
    const { output, events } = await run(
      flow([
        { id: 'plan', kind: 'agent', agent: 'planner' },
        {
          id: 'build-each',
          kind: 'foreach',
          items: 'steps.plan.output.parts',
          maxItems: 5,
          concurrency: 1,
          do: [
            {
              id: 'both',
              kind: 'parallel',
              branches: {
                code: [{ id: 'build', kind: 'agent', agent: 'builder' }],
                review: [{ id: 'check', kind: 'agent', agent: 'checker' }],
              },
            },
          ],
        },
        { id: 'close', kind: 'agent', agent: 'closer' },
      ]),
      {
        planner: plan(['a', { name: 'b' }]),
        builder: () => text('built'),
        checker: () => text('checked'),
        closer: () => text('closed'),
      },
    );
    expect(output.status).toBe('completed');
    const started = ofKind(events, 'step.started');
    expect(started.find((e) => e.data.step === 'plan')?.data).not.toHaveProperty('within');
    expect(started.filter((e) => e.data.step === 'check').map((e) => e.data.within)).toEqual([
      [
        { step: 'build-each', item: 0, value: '"a"' },
        { step: 'both', branch: 'review' },
      ],
      [
        { step: 'build-each', item: 1, value: '{"name":"b"}' },
        { step: 'both', branch: 'review' },
      ],
    ]);
    // The join of each item's parallel step says where it is too, without the item itself.
    expect(ofKind(events, 'branches.joined').map((e) => e.data.within)).toEqual([
      [{ step: 'build-each', item: 0 }],
      [{ step: 'build-each', item: 1 }],
    ]);
    const handoffs = ofKind(events, 'agent.handoff');
    expect(handoffs.find((e) => e.data.step === 'close')).toMatchObject({
      from: 'build-each',
      to: 'closer',
      data: { join: 'build-each' },
    });
    // Inside an item, the first step is handed on by whoever came before the foreach: here the planner.
    expect(handoffs.find((e) => e.data.step === 'build')).toMatchObject({ from: 'planner' });
    expect(handoffs.find((e) => e.data.step === 'build')?.data).not.toHaveProperty('join');
  });
});
