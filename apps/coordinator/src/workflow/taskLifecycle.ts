import type { TroupeEvent } from '@troupe/protocol';
import { assign, fromPromise, setup } from 'xstate';
import { HAND_BACK_DELAY_MS, type TaskDelivery } from '../intake/taskQueue.ts';

/**
 * Where a task goes next, as each stage of its lifecycle decides. `work` is what the next stage needs (the task, its
 * record as read, this run's claim on it), opaque to the lifecycle.
 */
export type Stage =
  | { next: 'claim'; work: unknown }
  | { next: 'run'; work: unknown }
  | { next: 'giveUp'; work: unknown }
  /** Its record holds its final status and event: publish the event, then settle the message (`term` when given up on). */
  | { next: 'conclude'; final: TroupeEvent; settle?: 'ack' | 'term' }
  /** Nothing to do for it: a resubmission of a task id already taken, an ended task with nothing to publish. */
  | { next: 'ack' }
  /** To be delivered again, to this or another coordinator: this one is stopping, or lost a race for the task. */
  | { next: 'handBack' }
  /** Left alone: another run owns the task now, or its message is left to a redelivery. */
  | { next: 'leave' }
  /** Not a task: reported; the message is terminated, never delivered again. */
  | { next: 'refuse' };

/** The stages' work, given by the pipeline runner (see `pipelineRunner.ts`). */
export interface TaskStages {
  /** Reads the message and the task's record: what to do with this delivery. */
  triage(delivery: TaskDelivery): Promise<Stage>;
  /** Claims the task in its record for this run. */
  claim(work: unknown): Promise<Stage>;
  /** Records that the task is given up on, and dead-letters it. */
  giveUp(work: unknown): Promise<Stage>;
  /** Runs the workflow to its end, or until it is released, and records how it ended. */
  run(work: unknown): Promise<Stage>;
  /** Publishes the final event and closes the task's requests: `settled`, or `left` to a redelivery. */
  conclude(input: { delivery: TaskDelivery; final: TroupeEvent }): Promise<'settled' | 'left'>;
  /** This process is stopping: a run in progress is released (its workflow hands the task back). */
  release(work: unknown): void;
}

export interface TaskLifecycleInput {
  delivery: TaskDelivery;
}

interface TaskLifecycleContext extends TaskLifecycleInput {
  work?: unknown;
  final?: TroupeEvent;
  settle: 'ack' | 'term';
  /** A stage failed (a fault of the code, or NATS lost for good): the message is left to a redelivery. */
  error?: unknown;
}

/** How the lifecycle ended, for its handler: with an error when a stage failed. */
export type TaskLifecycleOutput = { error?: unknown };

type Done = { event: { output: Stage } };

/**
 * The transitions of a stage's result: to the next stage, or to how the message is settled. Built once for every
 * stage, so typed loosely here; the tests go through each.
 */
function routes(): never {
  const to = (next: Stage['next'], target: string, actions?: object) => ({
    guard: ({ event }: Done) => event.output.next === next,
    target,
    ...(actions ? { actions } : {}),
  });
  const work = assign(({ event }: Done) => ('work' in event.output ? { work: event.output.work } : {}));
  return [
    to('claim', 'claiming', work),
    to('run', 'running', work),
    to('giveUp', 'givingUp', work),
    to(
      'conclude',
      'concluding',
      assign(({ event }: Done) =>
        event.output.next === 'conclude'
          ? { final: event.output.final, settle: event.output.settle ?? 'ack' }
          : {},
      ),
    ),
    to('ack', 'acked'),
    to('handBack', 'handedBack'),
    to('refuse', 'refused'),
    { target: 'left' },
  ] as never;
}

/**
 * One delivery of a task message, from its arrival to how the message is settled, as an actor:
 *
 * ```
 * triaging --> claiming --> running --> concluding --> acked | terminated
 *    |  \          |           |             \
 *    |   givingUp -+-----------+--------------+--> handedBack (nak) | left (nothing: another run owns it)
 *    +--> acked (a duplicate) | refused (not a task)
 * ```
 *
 * Every ending of the task — completed, failed, cancelled, given up on — goes through `concluding`, after its record
 * holds the final status and event: the event is published, and the message acked (terminated when given up on)
 * once the stream has stored it. The message is settled only in the final states, each doing one thing. A `stop`
 * (the process shutting down) releases a run in progress, whose workflow hands the task back.
 */
export const taskLifecycleMachine = setup({
  types: {
    context: {} as TaskLifecycleContext,
    input: {} as TaskLifecycleInput,
    events: {} as { type: 'stop' },
    output: {} as TaskLifecycleOutput,
  },
  actors: {
    triage: fromPromise<Stage, TaskDelivery>(async () => {
      throw new Error('triage is not provided');
    }),
    claim: fromPromise<Stage, unknown>(async () => {
      throw new Error('claim is not provided');
    }),
    giveUp: fromPromise<Stage, unknown>(async () => {
      throw new Error('giveUp is not provided');
    }),
    run: fromPromise<Stage, unknown>(async () => {
      throw new Error('run is not provided');
    }),
    conclude: fromPromise<'settled' | 'left', { delivery: TaskDelivery; final: TroupeEvent }>(async () => {
      throw new Error('conclude is not provided');
    }),
  },
  actions: {
    release: () => {
      throw new Error('release is not provided');
    },
  },
}).createMachine({
  id: 'task',
  context: ({ input }) => ({ ...input, settle: 'ack' }),
  initial: 'triaging',
  states: {
    triaging: {
      invoke: {
        src: 'triage',
        input: ({ context }) => context.delivery,
        onDone: routes(),
        onError: 'failed',
      },
    },
    claiming: {
      invoke: {
        src: 'claim',
        input: ({ context }: { context: TaskLifecycleContext }) => context.work,
        onDone: routes(),
        onError: 'failed',
      },
    },
    givingUp: {
      invoke: {
        src: 'giveUp',
        input: ({ context }: { context: TaskLifecycleContext }) => context.work,
        onDone: routes(),
        onError: 'failed',
      },
    },
    running: {
      invoke: {
        src: 'run',
        input: ({ context }: { context: TaskLifecycleContext }) => context.work,
        onDone: routes(),
        onError: 'failed',
      },
      on: { stop: { actions: 'release' } },
    },
    concluding: {
      invoke: {
        src: 'conclude',
        input: ({ context }) => ({ delivery: context.delivery, final: context.final as TroupeEvent }),
        onDone: [
          { guard: ({ event }) => event.output === 'left', target: 'left' },
          { guard: ({ context }) => context.settle === 'term', target: 'terminated' },
          { target: 'acked' },
        ],
        onError: 'failed',
      },
    },
    acked: { type: 'final', entry: ({ context }) => context.delivery.ack() },
    terminated: { type: 'final', entry: ({ context }) => context.delivery.term() },
    refused: { type: 'final', entry: ({ context }) => context.delivery.term() },
    handedBack: { type: 'final', entry: ({ context }) => context.delivery.nak(HAND_BACK_DELAY_MS) },
    left: { type: 'final' },
    failed: {
      type: 'final',
      entry: assign({ error: ({ event }) => (event as { error?: unknown }).error }),
    },
  },
  output: ({ context }) => (context.error === undefined ? {} : { error: context.error }),
});
