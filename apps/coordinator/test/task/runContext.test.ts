import type { StepActivity } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { assign, createActor, fromPromise, setup, toPromise } from 'xstate';
import {
  RUN_CONTEXT_ID,
  type RunContextEvent,
  type RunFacts,
  reportActivity,
  runContextLogic,
  runFactsOf,
} from '../../src/task/runContext.ts';
import { type TaskSignal, TaskSignals } from '../../src/task/taskSignals.ts';

const facts: RunFacts = { taskId: 't1', firstDelivery: true, traceparent: '00-a-b-01', version: 'v1' };
const activity: StepActivity = {
  kind: 'agent',
  step: 'plan',
  agent: 'planner',
  since: '2026-01-01T00:00:00.000Z',
};

interface Heard {
  heard: StepActivity[];
  read?: RunFacts | undefined;
}

/** A task-like parent: the run context beside a step that reads the facts and reports what it does. */
const parent = setup({
  types: {
    context: {} as Heard,
    events: {} as RunContextEvent,
    output: {} as Heard,
  },
  actors: {
    runContext: runContextLogic,
    step: fromPromise<RunFacts | undefined>(async ({ system }) => {
      reportActivity(system, activity);
      return runFactsOf(system);
    }),
  },
}).createMachine({
  context: { heard: [] },
  invoke: { src: 'runContext', systemId: RUN_CONTEXT_ID, input: facts },
  on: {
    activity: { actions: assign({ heard: ({ context, event }) => [...context.heard, event.activity] }) },
  },
  initial: 'working',
  states: {
    working: {
      invoke: {
        src: 'step',
        onDone: { target: 'done', actions: assign({ read: ({ event }) => event.output }) },
      },
    },
    done: { type: 'final' },
  },
  output: ({ context }) => context,
});

describe('a run context', () => {
  it('gives an actor of the task its run facts and passes its activity to the task', async () => {
    const actor = createActor(parent).start();
    const output = await toPromise(actor);
    expect(output.read).toEqual(facts);
    expect(output.heard).toEqual([activity]);
  });

  it('is absent outside a task run: no facts, and a report goes nowhere', async () => {
    const alone = createActor(
      fromPromise(async ({ system }) => {
        reportActivity(system, activity);
        return runFactsOf(system) ?? 'none';
      }),
    ).start();
    expect(await toPromise(alone)).toBe('none');
  });
});

describe("a task's run context", () => {
  const signals = new TaskSignals();
  /** A task-like parent whose run context also listens for the task's signals, and keeps what it hears. */
  const listening = setup({
    types: {
      context: {} as { heard: string[] },
      events: {} as TaskSignal | RunContextEvent | { type: 'end' },
    },
    actors: { runContext: runContextLogic },
  }).createMachine({
    context: { heard: [] },
    initial: 'running',
    states: {
      running: {
        invoke: {
          src: 'runContext',
          systemId: RUN_CONTEXT_ID,
          input: { ...facts, signals: { from: signals, parent: 'p1' } },
        },
        on: {
          stop: { actions: assign({ heard: ({ context }) => [...context.heard, 'stop'] }) },
          parentEnded: {
            actions: assign({ heard: ({ context, event }) => [...context.heard, `parent: ${event.reason}`] }),
          },
          end: 'ended',
        },
      },
      ended: {},
    },
  });

  it('passes the signals for its task to the task while the run lasts, and stops listening when it ends', () => {
    const actor = createActor(listening).start();
    expect(signals.has('t1')).toBe(true);
    expect(signals.versionOf('t1')).toBe('v1');
    expect(signals.send('t1', { type: 'stop' })).toBe(true);
    expect(signals.parentEnded('p1', 'the parent failed')).toEqual(['t1']);
    expect(actor.getSnapshot().context.heard).toEqual(['stop', 'parent: the parent failed']);
    actor.send({ type: 'end' });
    expect(signals.has('t1')).toBe(false);
    expect(signals.send('t1', { type: 'stop' })).toBe(false);
    actor.stop();
  });
});
