import type { ControlReceipt, ErrorReply } from '@troupe/protocol';
import type { WorkflowInput } from '../workflow/workflowTypes.ts';

/** What a migration asks of a running task: move it to `version` unless `problem` finds something against it. */
export interface MigrateRequest {
  version: string;
  /** Why the task (its checkpoint and input as they are now) cannot move; undefined when it can. */
  problem: (snapshot: unknown, input: WorkflowInput) => string | undefined;
}

/**
 * How a task answers a migration: why it was not moved, or `recorded`, which settles with whether the new version
 * was written into its record.
 */
export type MigrateAnswer = string | { recorded: Promise<boolean> };

/** How a task answers a pause, a resume or a tell: the receipt once it is recorded, or why nothing was changed. */
export type SteerAnswer = (reply: ControlReceipt | ErrorReply) => void;

/** What reaches a task actor from outside while its workflow runs here. */
export type TaskSignal =
  /** `troupe cancel`: `answer(true)` when the cancel was taken, false when the task is ending already. */
  | { type: 'cancel'; reason?: string; answer: (taken: boolean) => void }
  /** `troupe migrate`: checked and let go in one turn, so no step reply can move the workflow in between. */
  | ({ type: 'migrate'; answer: (answer: MigrateAnswer) => void } & MigrateRequest)
  /** `troupe pause`: the task is held once its steps at work finish their current call (see `taskSteering.ts`). */
  | { type: 'pause'; reason?: string; by?: string; answer: SteerAnswer }
  /** `troupe resume`: a held task goes on, its held steps sent again. */
  | { type: 'resume'; by?: string; answer: SteerAnswer }
  /** `troupe tell`: a person's message for the agent at work, or the next one; a retry with its `key` is taken once. */
  | { type: 'tell'; text: string; by?: string; key?: string; answer: SteerAnswer }
  /** The task's parent task ended: the sub-task ends with it. */
  | { type: 'parentEnded'; reason: string }
  /** This process is stopping: the task is handed back, to be resumed elsewhere. */
  | { type: 'stop' };

/** A task actor listening here: its task, its parent task (if a `pipeline` step submitted it), its version. */
export interface SignalListener {
  taskId: string;
  parent?: string;
  version?: string;
  deliver: (signal: TaskSignal) => void;
}

/**
 * The runner's switchboard for its tasks' signals: the one control subscription and the one parent watch send to a
 * task id, and the task actor running that task here hears it (through its run context, `runContext.ts`). A signal for a
 * task no actor here runs reaches nobody, and the sender knows it (`send` is false).
 */
export class TaskSignals {
  readonly #listeners = new Map<string, SignalListener>();
  /**
   * The sub-tasks listening here, by parent task: what a parent's end reaches, found without a look at every task
   * (the runner asks on each task event whether any sub-task listens at all).
   */
  readonly #children = new Map<string, Set<SignalListener>>();

  /** Starts delivering a task's signals to its actor; returns how to stop. */
  listen(listener: SignalListener): () => void {
    const before = this.#listeners.get(listener.taskId);
    if (before) this.#forget(before);
    this.#listeners.set(listener.taskId, listener);
    if (listener.parent !== undefined) {
      let children = this.#children.get(listener.parent);
      if (!children) {
        children = new Set();
        this.#children.set(listener.parent, children);
      }
      children.add(listener);
    }
    return () => {
      if (this.#listeners.get(listener.taskId) === listener) this.#forget(listener);
    };
  }

  #forget(listener: SignalListener): void {
    this.#listeners.delete(listener.taskId);
    if (listener.parent === undefined) return;
    const children = this.#children.get(listener.parent);
    children?.delete(listener);
    if (children?.size === 0) this.#children.delete(listener.parent);
  }

  /** Sends a signal to the actor running `taskId` here; false when none does. */
  send(taskId: string, signal: TaskSignal): boolean {
    const listener = this.#listeners.get(taskId);
    if (!listener) return false;
    listener.deliver(signal);
    return true;
  }

  /** Tells every sub-task here whose parent is `parent` that it ended; returns the sub-tasks told. */
  parentEnded(parent: string, reason: string): string[] {
    const children = [...(this.#children.get(parent) ?? [])];
    for (const child of children) child.deliver({ type: 'parentEnded', reason });
    return children.map((child) => child.taskId);
  }

  /** Tells every task here that this process is stopping. */
  stop(): void {
    for (const listener of [...this.#listeners.values()]) listener.deliver({ type: 'stop' });
  }

  /** Whether an actor here runs `taskId` now. */
  has(taskId: string): boolean {
    return this.#listeners.has(taskId);
  }

  /** The version the task running here runs on, as its actor said when it began listening. */
  versionOf(taskId: string): string | undefined {
    return this.#listeners.get(taskId)?.version;
  }

  /** Whether any sub-task here waits on its parent's ending. */
  get hasChildren(): boolean {
    return this.#children.size > 0;
  }

  /** The tasks whose actors listen here now. */
  taskIds(): string[] {
    return [...this.#listeners.keys()];
  }
}
