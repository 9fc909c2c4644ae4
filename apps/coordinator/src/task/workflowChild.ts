import { type ActorLogic, type ActorSystem, createActor, type Snapshot, type SnapshotFrom } from 'xstate';
import { hearEndedItems, unfitItem, type WorkflowMachine } from '../workflow/compileFlow.ts';
import type { WorkflowEmitted, WorkflowInput } from '../workflow/workflowTypes.ts';

/** A task's workflow as its task actor sees it. */
export type WorkflowSnapshot = SnapshotFrom<WorkflowMachine>;
/** Where the workflow runs, as its machine is given it: its actor, its system, what it emits. */
type WorkflowScope = Parameters<WorkflowMachine['transition']>[2];

/** Which workflow a task actor invokes, and from where it starts. */
export interface WorkflowChildInput {
  /** The flow of the version the task runs on, its steps provided. */
  machine: WorkflowMachine;
  input: WorkflowInput;
  /** The workflow's persisted snapshot (the task record's `snapshot`) it resumes from; a new run when absent. */
  saved?: unknown;
  /** Hears each event the workflow emits, to be published. */
  onEmitted: (emitted: WorkflowEmitted) => void;
  /**
   * Hears each of the workflow's snapshots, its first and its done one included, as the workflow takes it: its
   * checkpoint writer, with no event through the task actor for each.
   */
  onSnapshot?: (snapshot: WorkflowSnapshot) => void;
}

// biome-ignore lint/suspicious/noExplicitAny: a task actor's system holds actors of every kind.
type AnySystem = ActorSystem<any>;

/**
 * The workflow as a child of its task actor: the compiled machine of the task's version, started fresh or restored
 * from the task's checkpoint in the task's own actor system (so its steps, items and timers are the task's
 * grandchildren, on the task's clock). It delegates every step to that machine; only where it starts differs:
 * `restoreSnapshot` of the saved snapshot rather than a new one, and foreach items that had ended when the
 * checkpoint was taken are told to the workflow once it runs.
 */
export const workflowChildLogic: ActorLogic<
  WorkflowSnapshot,
  Parameters<WorkflowMachine['transition']>[1],
  WorkflowChildInput,
  AnySystem,
  Parameters<WorkflowScope['emit']>[0]
> = {
  getInitialSnapshot(scope, { machine, input, saved, onEmitted, onSnapshot }) {
    scope.self.on('event', onEmitted);
    // A failure is the task actor's to hear (its `onError`); the writer has nothing to checkpoint of it.
    if (onSnapshot) scope.self.subscribe({ next: onSnapshot, error: () => {} });
    return saved === undefined
      ? machine.getInitialSnapshot(scope, input)
      : machine.restoreSnapshot(saved as Snapshot<unknown>, scope);
  },
  transition: (snapshot, event, scope) => flowOf(snapshot).transition(snapshot, event, scope),
  start(snapshot, scope) {
    snapshot.machine.start(snapshot);
    hearEndedItems(scope.self);
  },
  getPersistedSnapshot: (snapshot, options) => snapshot.machine.getPersistedSnapshot(snapshot, options),
};

/**
 * The machine a workflow snapshot belongs to: the flow it was made by. xstate types `snapshot.machine` with what it
 * emits widened to any event, which a flow's own `transition` does not take, so the type is restated here, once.
 */
function flowOf(snapshot: WorkflowSnapshot): WorkflowMachine {
  return snapshot.machine as unknown as WorkflowMachine;
}

/**
 * Why a checkpoint does not restore in a version's flow (a step it is in, or a foreach item at work, is not
 * there), or undefined when it does. Restored apart, never started: nothing of it runs.
 */
export function checkpointMisfit(
  machine: WorkflowMachine,
  input: WorkflowInput,
  saved: unknown,
): { error: unknown } | undefined {
  const restored = createActor(machine, { input, snapshot: saved as Snapshot<unknown> }).getSnapshot();
  // A foreach item's workflow is restored apart from the task's: one that does not fit leaves the task's active.
  return restored.status === 'error' ? { error: restored.error } : unfitItem(restored);
}
