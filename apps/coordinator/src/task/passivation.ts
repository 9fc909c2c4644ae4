import type { Clock, Logger } from '@troupe/runtime';
import { type Actor, type AnyActorRef, createActor, toPromise } from 'xstate';
import type { TaskDelivery } from '../intake/taskQueue.ts';
import { PeopleInFlight } from '../workflow/peopleInFlight.ts';
import { SendsInFlight } from '../workflow/sendsInFlight.ts';
import type { HumanRunInput } from '../workflow/workflowTypes.ts';
import type { CheckpointWriter } from './checkpointWriter.ts';
import { type Kept, PassivatedCopies } from './passivatedCopies.ts';
import { notRunning } from './steerTask.ts';
import type { createTaskMachine } from './taskMachine.ts';
import type { Hold, TaskActorInput } from './taskSetup.ts';
import type { TaskSignal, TaskSignals } from './taskSignals.ts';

/**
 * How long a task's steps must have only waited before it is passivated, unless the runner is told otherwise. A
 * step still waiting on its model after 5 s is a long call: the core workload's steps and most tool calls end well
 * before, so they pay nothing, and a shorter wait would save memory for too short a while to pay for the restore.
 * It is well inside the keep-alive interval and the ack wait (10 s and 30 s by default).
 */
export const DEFAULT_PASSIVATE_AFTER_MS = 5_000;

/** The task machine of a runner, built once from its services. */
type TaskMachine = ReturnType<typeof createTaskMachine>;

/** A task actor of a runner, as the runner creates it per delivery. */
export type TaskActor = Actor<TaskMachine>;

/** What a runner's passivation works with: the runner's clock, logger and signals, and its keep-alive interval. */
export interface PassivationServices {
  clock: Clock;
  logger: Logger;
  /** How often a task's message is kept alive (the runner's `keepAliveMs`): a passivated task's are kept from here. */
  keepAliveMs: number;
  signals: TaskSignals;
}

interface PassivationOptions extends PassivationServices {
  /** How long a task's steps must have only waited (on a model or a person) before its tree is stopped. */
  afterMs: number;
}

/**
 * A runner's passivation, as its `passivateAfterMs` option sets it: after `afterMs` of waiting
 * ({@link DEFAULT_PASSIVATE_AFTER_MS} when not given), none at 0. A threshold that is no number of milliseconds is
 * refused, the runner not started.
 */
export function passivationOf(
  afterMs: number | undefined,
  services: PassivationServices,
): Passivation | undefined {
  const after = afterMs ?? DEFAULT_PASSIVATE_AFTER_MS;
  if (!Number.isFinite(after) || after < 0)
    throw new Error(
      `passivateAfterMs must be 0 (passivation off) or a number of milliseconds above 0, not ${after}`,
    );
  return after > 0 ? new Passivation({ ...services, afterMs: after }) : undefined;
}

/**
 * Runs a delivery's task to its end here: its task actor, and when a passivation stops it, the next one started once
 * the task is woken, and so on. Resolves with the task actor that ran it to its end.
 */
export async function runTask(
  machine: TaskMachine,
  delivery: TaskDelivery,
  { clock, passivation }: { clock: Clock; passivation: Passivation | undefined },
): Promise<TaskActor> {
  let run = await runActor(machine, { delivery }, clock, passivation);
  // Nothing here keeps the stopped actor while its task sleeps: only the promise of its waking.
  while ('woken' in run) run = await runActor(machine, run.by.restore(await run.woken), clock, passivation);
  return run.task;
}

/**
 * A task actor started on `input` (watched for passivation), once it has ended: the actor, or, passivated, its task's
 * waking (resolves with its id) and the passivation that restores it.
 */
async function runActor(
  machine: TaskMachine,
  input: TaskActorInput,
  clock: Clock,
  passivation: Passivation | undefined,
): Promise<{ task: TaskActor } | { woken: Promise<string>; by: Passivation }> {
  const task = createActor(machine, { input, clock });
  passivation?.watch(task);
  task.start();
  if (input.woken) passivation?.started(input.woken.claimed.input.taskId, task);
  await toPromise(task).catch(() => {});
  const woken = passivation?.wakingOf(task);
  if (passivation && woken) return { woken, by: passivation };
  if (input.woken) passivation?.ended(input.woken.claimed.input.taskId);
  return { task };
}

/** A passivated task: what it kept, and how it is woken. */
interface Asleep {
  taskId: string;
  delivery: TaskDelivery;
  /** Its hold on the task: its claim and flow, its writer (idle, its last record let go), steering, span and facts. */
  hold: Hold;
  /** Its one copy of its workflow's persisted snapshot and its writer's last record (see `passivatedCopies.ts`). */
  packed: string;
  keptAliveAt: number;
  /**
   * The signals that came while it slept (the one that woke it among them) and until its new actor listened: delivered
   * to that actor once it does.
   */
  signals?: TaskSignal[];
  /** Resolves the promise of its waking (see {@link Passivation.wakingOf}). */
  wake: (taskId: string) => void;
  /** Stops the passivated task's signal listener: the woken actor's run context listens in its place. */
  unlisten: () => void;
  awake: boolean;
}

/** The most tasks one sweep passivates before it lets the event loop go on (see `Passivation.#sweep`). */
export const PASSIVATIONS_PER_SWEEP = 100;

/**
 * The most tasks of a runner left awake while they only wait: beyond them, the ones that have waited longest are
 * passivated once they have waited {@link CROWD_MIN_WAIT_MS}, without waiting for the runner's `afterMs`. A passivation
 * and its waking cost about 1.5 ms of CPU (the task's here and its step's on the agent host), which a few tasks waiting
 * a few seconds are not worth; a crowd of them is (an awake task keeps about 37 KB, a passivated one 15 KB). The same
 * rule as an active-entity limit of Akka Cluster Sharding's passivation.
 */
export const AWAKE_WAITING_MAX = 200;

/** How long a task beyond {@link AWAKE_WAITING_MAX} must have waited to be passivated: a short wait costs nothing. */
export const CROWD_MIN_WAIT_MS = 1_000;

/** How soon the sweep looks again while more than {@link AWAKE_WAITING_MAX} tasks wait awake. */
const CROWD_SWEEP_MS = 250;

/**
 * Passivation of a runner's tasks: a task whose steps have only waited for `afterMs` (a step's send in flight on a
 * slow model or a person, a `human` step's question) has its actor tree stopped, keeping only what it needs to go on:
 * its hold on the task, one compact copy of the workflow's persisted snapshot as it stood and of its writer's last
 * record (see `passivatedCopies.ts`), its message, and its sends and questions in flight, which go on outside the tree
 * (`sendsInFlight.ts`, `peopleInFlight.ts`). It is woken, its tree restored in this process from that snapshot as a
 * crash resume restores from the record (no record read, no record written, no event), when its send has something its
 * step call must hear (the reply, a failure, a hold, a reconnect, a change of what the step waits on), its human step
 * has its outcome (the answer, the deadline), or a signal comes for it through the runner's
 * {@link TaskSignals} (cancel, migrate, pause, resume, tell, a parent's end, the process's stop). One timer serves
 * every task: it finds the tasks to passivate and keeps the passivated tasks' messages alive.
 *
 * Stopping the tree runs none of its cancel paths: xstate runs no exit action on a stop, the send is kept going, and
 * the task's writer, steering and span are kept as they were (the writer is idle: nothing is left to write, and it
 * lets go of its last record, which the copy holds, until the task wakes).
 */
export class Passivation {
  readonly #live = new Set<TaskActor>();
  readonly #asleep = new Map<string, Asleep>();
  readonly #passivated = new WeakMap<TaskActor, Promise<string>>();
  /** The task actor holding each writer now; none for a passivated task's, so nothing keeps its stopped actor. */
  readonly #owners = new WeakMap<CheckpointWriter, AnyActorRef>();
  readonly #copies = new PassivatedCopies();
  #timer: unknown;
  readonly #tickMs: number;
  /** The step sends in flight of the runner's tasks, which a passivated task's restored step calls adopt. */
  readonly sends = new SendsInFlight();
  /** The `human` steps under way of the runner's tasks, which a passivated task's restored steps adopt. */
  readonly people = new PeopleInFlight();

  constructor(private readonly options: PassivationOptions) {
    this.#tickMs = Math.max(10, Math.floor(Math.min(options.afterMs, options.keepAliveMs) / 2));
    this.sends.onMustHear = (taskId) => this.#wake(taskId);
    this.people.onMustHear = (taskId) => this.#wake(taskId);
  }

  /** Tasks passivated now. */
  get passivated(): number {
    return this.#asleep.size;
  }

  /** A task actor, watched from its start until it ends, to be passivated when it only waits. */
  watch(task: TaskActor): void {
    this.#live.add(task);
    const done = () => this.#live.delete(task);
    task.subscribe({ complete: done, error: done });
  }

  /** `writer` is task actor `task`'s now (from its claim, or its waking). */
  ownedBy(writer: CheckpointWriter, task: AnyActorRef): void {
    this.#owners.set(writer, task);
  }

  /** A task's steps began to only wait: if only in ways it can be passivated, the timer runs (if not already). */
  waiting(writer: CheckpointWriter): void {
    const task = this.#owners.get(writer);
    if (task && this.#safely(() => onlyWaiting(task.getSnapshot().children, this.people))) this.#tick();
  }

  /**
   * The task actor ended: if it was passivated, resolves with its task's id once the task is woken (its next actor
   * starts from {@link restore}); undefined when it ended otherwise.
   */
  wakingOf(task: TaskActor): Promise<string> | undefined {
    return this.#passivated.get(task);
  }

  /**
   * What the woken task's next actor starts from: its hold, with its workflow's snapshot and its writer's last record
   * read back from its copy. A copy that cannot be read (a fault of ours) throws, its signals refused and its sends
   * stopped first: the task's message is left to a redelivery, which resumes it from its record.
   */
  restore(taskId: string): TaskActorInput {
    const asleep = this.#asleep.get(taskId);
    if (!asleep)
      throw new Error(`passivation: task ${taskId} is not asleep here (a bug in task/passivation.ts)`);
    const { hold, delivery, keptAliveAt } = asleep;
    let kept: Kept;
    try {
      kept = this.#copies.unpack(asleep.packed);
    } catch (error) {
      this.#unrestored(asleep);
      throw new Error(`cannot restore passivated task ${taskId} here: what it kept cannot be read`, {
        cause: error,
      });
    }
    hold.writer.awaken(kept);
    const woken = { ...hold, restored: kept.snapshot };
    return { delivery, woken: { claimed: hold.claimed, flow: hold.flow, hold: woken, keptAliveAt } };
  }

  /**
   * The woken task's new actor has started and listens for its signals now: those that came meanwhile are given to it,
   * then what its sends kept for their calls. One that failed to start (its tree could not be restored) is given up.
   */
  started(taskId: string, task: TaskActor): void {
    const asleep = this.#asleep.get(taskId);
    if (!asleep?.awake) return;
    if (task.getSnapshot().status !== 'active') {
      this.#unrestored(asleep);
      return;
    }
    this.#asleep.delete(taskId);
    asleep.unlisten();
    for (const signal of asleep.signals ?? []) {
      if (!this.options.signals.send(taskId, signal)) task.send(signal);
    }
    this.sends.started(taskId);
  }

  /**
   * A woken task that cannot be restored here: its signals are answered with a refusal, its sends stopped, its human
   * steps' runs stopped with their questions left pending. A restored tree that failed may have taken a run up first:
   * it is let go of that tree before the run is stopped, so the run is stopped as one nobody hears (left pending for
   * the redelivery), not as one its step gave up (closed expired).
   */
  #unrestored(asleep: Asleep): void {
    const { taskId } = asleep;
    this.#asleep.delete(taskId);
    asleep.unlisten();
    for (const signal of asleep.signals ?? []) refuse(signal, taskId);
    this.sends.detach(taskId);
    this.sends.abandon(taskId);
    this.people.detach(taskId);
    this.people.abandon(taskId);
  }

  /** The task's actor ended: a send of it that no call adopted (its tree failed after its waking) is stopped. */
  ended(taskId: string): void {
    this.sends.abandon(taskId);
    this.people.abandon(taskId);
  }

  /** Stops the timer (the runner stops; its passivated tasks are woken by the stop signal). */
  close(): void {
    if (this.#timer !== undefined) this.options.clock.clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  /**
   * Runs the timer while it has something to do: a passivated task to keep alive, or a task that only waits and could
   * be passivated. A task that waits in a way that cannot be (a held step, a sub-task) keeps no timer running; it is
   * looked at again when its steps next begin to wait.
   */
  #tick(delayMs = this.#tickMs): void {
    if (this.#timer !== undefined) return;
    this.#timer = this.options.clock.setTimeout(() => {
      this.#timer = undefined;
      const next = this.#sweep();
      if (next !== undefined) this.#tick(next);
    }, delayMs);
  }

  /**
   * Passivates the tasks that have waited long enough, keeps the passivated ones alive; when to look again (undefined:
   * not until a task next begins to wait). At most {@link PASSIVATIONS_PER_SWEEP} tasks are passivated in one go, the
   * rest right after, so a crowd that began to wait together does not hold the event loop (each takes its snapshot,
   * deflated, and stops its tree: about 0.15 ms).
   */
  #sweep(): number | undefined {
    const { clock, afterMs, keepAliveMs } = this.options;
    const now = clock.now();
    /** The tasks that only wait, not yet for `afterMs`: since when (infinite while their writer has work left). */
    const waiting: { task: TaskActor; since: number }[] = [];
    let passivated = 0;
    const passivate = (task: TaskActor) => {
      this.#safely(() => this.#passivate(task));
      passivated += 1;
    };
    for (const task of [...this.#live]) {
      if (passivated === PASSIVATIONS_PER_SWEEP) return 0;
      const since = this.#safely(() => waitingSince(task, this.people));
      if (since === undefined) continue;
      if (now - since >= afterMs) passivate(task);
      else waiting.push({ task, since });
    }
    const crowded = waiting.length > AWAKE_WAITING_MAX;
    if (crowded) {
      waiting.sort((a, b) => a.since - b.since);
      for (const { task, since } of waiting.slice(0, waiting.length - AWAKE_WAITING_MAX)) {
        if (now - since < CROWD_MIN_WAIT_MS) break;
        if (passivated === PASSIVATIONS_PER_SWEEP) return 0;
        passivate(task);
      }
    }
    for (const asleep of this.#asleep.values()) {
      if (asleep.awake || now - asleep.keptAliveAt < keepAliveMs) continue;
      asleep.keptAliveAt = now;
      this.#safely(() => asleep.delivery.working());
    }
    if (waiting.length === 0 && this.#asleep.size === 0) return undefined;
    return crowded ? Math.min(CROWD_SWEEP_MS, this.#tickMs) : this.#tickMs;
  }

  /** A fault of ours while looking at a task is logged: it leaves that task live, and reaches no timer or writer. */
  #safely<T>(look: () => T): T | undefined {
    try {
      return look();
    } catch (error) {
      this.options.logger.warn({ err: error }, 'passivation: cannot look at a task; it stays live');
      return undefined;
    }
  }

  #passivate(task: TaskActor): void {
    const snapshot = task.getSnapshot();
    const { hold, delivery, keptAliveAt } = snapshot.context;
    if (!hold || !snapshot.matches({ running: { live: 'working' } })) return;
    if (hold.ending !== undefined || hold.claimed.orphaned !== undefined) return;
    const workflow = onlyWaiting(snapshot.children, this.people);
    if (!workflow) return;
    const taskId = hold.claimed.input.taskId;
    let packed: string;
    try {
      packed = this.#copies.pack({ snapshot: workflow.getPersistedSnapshot(), ...hold.writer.lastMade });
    } catch (error) {
      this.options.logger.warn({ err: error, taskId }, 'cannot passivate the task; it stays live');
      return;
    }
    this.#live.delete(task);
    const asleep: Asleep = {
      taskId,
      delivery,
      hold,
      packed,
      keptAliveAt,
      wake: nothing,
      unlisten: nothing,
      awake: false,
    };
    this.#passivated.set(
      task,
      new Promise((resolve) => {
        asleep.wake = resolve;
      }),
    );
    this.sends.detach(taskId);
    this.people.detach(taskId);
    task.stop();
    // Stopped at once unless the actor was busy (xstate then queues the stop): its sends would go on, unheard.
    if (task.getSnapshot().status !== 'stopped')
      this.options.logger.warn({ taskId }, 'passivation: the task actor was not stopped at once');
    hold.writer.detach();
    this.#owners.delete(hold.writer);
    this.#asleep.set(taskId, asleep);
    const parent = hold.claimed.input.parent?.taskId;
    asleep.unlisten = this.options.signals.listen({
      taskId,
      ...(parent === undefined ? {} : { parent }),
      ...(hold.facts.version === undefined ? {} : { version: hold.facts.version }),
      deliver: (signal) => {
        asleep.signals ??= [];
        asleep.signals.push(signal);
        this.#wake(taskId);
      },
    });
  }

  #wake(taskId: string): void {
    const asleep = this.#asleep.get(taskId);
    if (!asleep || asleep.awake) return;
    asleep.awake = true;
    this.sends.waking(taskId);
    asleep.wake(taskId);
  }
}

/** A sleeping task's waking and unlistening before they are set. */
const nothing = () => {};

/**
 * The workflow of a task whose tree only waits, or undefined: beside its run context, a workflow whose every child is
 * a step call with its send in flight (`calling.sent`) or a `human` step whose run is under way in `people`, and
 * nothing else (no sub-task, no timer).
 */
function onlyWaiting(
  children: Record<string, AnyActorRef | undefined>,
  people: PeopleInFlight,
): AnyActorRef | undefined {
  let workflow: AnyActorRef | undefined;
  for (const child of Object.values(children)) {
    if (!child) continue;
    if (child.src === 'workflow') workflow = child;
    else if (child.src !== 'runContext') return undefined;
  }
  if (workflow?.getSnapshot().status !== 'active') return undefined;
  const calls = Object.values<AnyActorRef | undefined>(workflow.getSnapshot().children);
  if (calls.length === 0) return undefined;
  for (const call of calls) {
    if (call?.src === 'askPerson' && waitsOnPerson(call, people)) continue;
    if (call?.src !== 'runStep') return undefined;
    // A stand-in that answers steps itself (a promise) has no send to keep: its task stays live.
    const state = call.getSnapshot();
    if (typeof state.matches !== 'function') return undefined;
    if (state.status !== 'active' || !state.matches({ calling: 'sent' })) return undefined;
    const sends = Object.values<AnyActorRef | undefined>(state.children);
    if (sends.length !== 1 || sends[0]?.src !== 'request') return undefined;
  }
  return workflow;
}

/** Whether a workflow's `askPerson` child is a run of its human step under way in `people` (not a stand-in's). */
function waitsOnPerson(call: AnyActorRef, people: PeopleInFlight): boolean {
  const state = call.getSnapshot() as { status?: string; input?: Partial<HumanRunInput> };
  const { taskId, stepId } = state.input ?? {};
  if (state.status !== 'active' || taskId === undefined || stepId === undefined) return false;
  return people.waiting(taskId, stepId);
}

/** Answers a signal for a woken task whose actor could not start: nothing was changed, the sender may try again. */
function refuse(signal: TaskSignal, taskId: string): void {
  const why = `task ${taskId} could not be restored here; nothing was changed, try again`;
  if (signal.type === 'cancel') signal.answer(false);
  else if (signal.type === 'migrate') signal.answer(why);
  else if (signal.type === 'pause' || signal.type === 'resume' || signal.type === 'tell')
    signal.answer(notRunning(why));
}

/**
 * Since when a task has only waited (its writer's idle time; infinite while the writer still has a record to write), or
 * undefined when it does more than wait: a step at work, a send to make, a workflow ending.
 */
function waitingSince(task: TaskActor, people: PeopleInFlight): number | undefined {
  const snapshot = task.getSnapshot();
  const writer = snapshot.context.hold?.writer;
  if (writer?.waitingSince === undefined || !onlyWaiting(snapshot.children, people)) return undefined;
  return writer.idleSince ?? Number.POSITIVE_INFINITY;
}
