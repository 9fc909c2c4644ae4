import type { StepActivity } from '@troupe/protocol';
import type { CallerCheckpoint } from '@troupe/runtime';
import { type ActorSystem, type CallbackSnapshot, fromCallback } from 'xstate';
import type { TaskSignal, TaskSignals } from './taskSignals.ts';
import type { TaskSteering } from './taskSteering.ts';

/** Any task's actor system, as an actor's creator receives it. */
// biome-ignore lint/suspicious/noExplicitAny: xstate types a system by its registered actors, which a provided actor cannot know.
type AnyActorSystem = ActorSystem<any>;

/** The `systemId` of a task's run context: one per task actor system, while its workflow runs. */
export const RUN_CONTEXT_ID = 'troupe.runContext';

/** What every step of a task's run in this process shares, fixed when the run starts. */
export interface RunFacts {
  taskId: string;
  /** The task's first delivery, which created its record: none of its steps can have run before (`fresh`). */
  firstDelivery: boolean;
  /** The `traceparent` the run's steps carry: its `invoke_workflow` span's, when traces are exported. */
  traceparent: string;
  /** The pipeline version the task runs on, which its steps name so hosts run that version's agents. */
  version?: string;
}

/** A run context's input: the run's facts and, in a task's run, where the task's signals come from. */
export interface RunContextInput extends RunFacts {
  /** The runner's signals and the task's parent task (if a `pipeline` step submitted it); none for a step alone. */
  signals?: { from: TaskSignals; parent?: string };
  /** Hears each activity report in place of the run context's parent: a task's checkpoint writer, with no event through the task actor. */
  onActivity?: (activity: StepActivity) => void;
  /** What people did to the task (pause, resume, tell), for its steps to read; none for a step alone. */
  steering?: TaskSteering;
  /** The task's checkpoint writer, as its steps wait for it (see {@link TaskCheckpoint}); none for a step alone. */
  checkpoint?: TaskCheckpoint;
}

/**
 * The task's checkpoints as its steps see them: a step taken in this process writes its journal only once they are
 * stored, and its reply owes its output to the next one; a step sent elsewhere, a person asked or a sub-task started
 * waits for an owed output to be stored first (see `CheckpointWriter.owe`).
 */
export interface TaskCheckpoint extends CallerCheckpoint {
  owe(): void;
  readonly owes: boolean;
}

/** What an actor of the run tells its task: what the current step is doing (for `troupe status`, and parking). */
export type RunContextEvent = { type: 'activity'; activity: StepActivity };

/**
 * A task's run context: an actor the task actor invokes beside its workflow with `systemId` {@link RUN_CONTEXT_ID},
 * holding the run's {@link RunFacts} as its input and passing each activity report on to the task actor. In a task's
 * run it is also the task's ear for its signals (cancel, migrate, pause, resume, tell, a parent's end, stop; see
 * `taskSignals.ts`): it listens for them while the run lasts and passes each one on too; and it holds the task's
 * steering (`taskSteering.ts`), which its steps read with {@link steeringOf}. One actor for all, since each actor a
 * parked task holds costs it a few KB of heap.
 *
 * Any actor in the task's tree reaches it through the system it was created in, with no table of running tasks:
 * a provided actor's creator receives `system` (`fromPromise(({ input, system }) => …)`, `fromCallback`, or a
 * machine's `({ system }) => …` in an action), reads the facts with {@link runFactsOf} and reports what its step is
 * doing with {@link reportActivity}. Both are no-ops (undefined) outside a task's run, e.g. in a unit test that runs
 * a workflow alone.
 *
 * @example
 * ```ts
 * runStep: fromPromise(({ input, system, signal }) => {
 *   const facts = runFactsOf(system);
 *   return call({ ...input, firstDelivery: facts?.firstDelivery ?? false }, signal, (activity) =>
 *     reportActivity(system, activity),
 *   );
 * });
 * ```
 */
export const runContextLogic = fromCallback<RunContextEvent, RunContextInput>(
  ({ input, receive, sendBack }) => {
    const { onActivity } = input;
    receive((event) => (onActivity ? onActivity(event.activity) : sendBack(event)));
    const { signals, taskId, version } = input;
    // The listener goes when the run does: xstate stops this actor when its task leaves `running`, or fails.
    return signals?.from.listen({
      taskId,
      ...(signals.parent === undefined ? {} : { parent: signals.parent }),
      ...(version === undefined ? {} : { version }),
      deliver: (signal: TaskSignal) => sendBack(signal),
    });
  },
);

/** The facts of the run whose actor system this is, or undefined outside a task's run. */
export function runFactsOf(system: AnyActorSystem): RunFacts | undefined {
  const snapshot: CallbackSnapshot<RunFacts> | undefined = system.get(RUN_CONTEXT_ID)?.getSnapshot();
  return snapshot?.status === 'active' ? snapshot.input : undefined;
}

/** The steering of the task whose actor system this is (held? told?), or undefined outside a task's run. */
export function steeringOf(system: AnyActorSystem): TaskSteering | undefined {
  const snapshot: CallbackSnapshot<RunContextInput> | undefined = system.get(RUN_CONTEXT_ID)?.getSnapshot();
  return snapshot?.status === 'active' ? snapshot.input.steering : undefined;
}

/** The checkpoints of the task whose actor system this is, or undefined outside a task's run. */
export function checkpointOf(system: AnyActorSystem): TaskCheckpoint | undefined {
  const snapshot: CallbackSnapshot<RunContextInput> | undefined = system.get(RUN_CONTEXT_ID)?.getSnapshot();
  return snapshot?.status === 'active' ? snapshot.input.checkpoint : undefined;
}

/**
 * Waits until the task's owed step output (see `CheckpointWriter.owe`) is stored, before what must not come ahead of
 * it: true at once when none is owed; false when it will not be stored (the task is lost or its run here over).
 */
export function untilOwedStored(system: AnyActorSystem): Promise<boolean> | true {
  const checkpoint = checkpointOf(system);
  return checkpoint?.owes ? checkpoint.stored() : true;
}

/** Tells the task of this actor system what its current step is doing; nothing outside a task's run. */
export function reportActivity(system: AnyActorSystem, activity: StepActivity): void {
  system.get(RUN_CONTEXT_ID)?.send({ type: 'activity', activity } satisfies RunContextEvent);
}
