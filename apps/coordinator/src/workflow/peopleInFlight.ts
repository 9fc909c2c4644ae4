import type { StepActivity } from '@troupe/protocol';
import type { HumanRunOutput } from './workflowTypes.ts';

/** Where a `human` step says what it does (that it waits on a person): its task's tree, as it is now. */
type Report = (taskId: string, activity: StepActivity) => void;

/**
 * A `human` step's wait on a person, as {@link PeopleInFlight} keeps it: the run of the step (its question asked or
 * taken up, and its wait for the answer or the deadline) goes on outside its task's actor tree, so the tree can be
 * stopped while the task is passivated and a step restored from its snapshot adopts the run under way — nobody is
 * asked twice, and the step's time counts from when it started.
 */
export class PersonWait {
  /** What stops the run: the actor hearing it stopped (its signal, forwarded), or the wait abandoned. */
  readonly #abort = new AbortController();
  /** The signal of the actor hearing the run now, and what forwards its abort; none while its task sleeps. */
  #heard: { signal: AbortSignal; forward: () => void } | undefined;
  #report: Report;
  #settled = false;
  /** The run's outcome, for the actor that hears it (the first, or one restored after a passivation). */
  outcome!: Promise<HumanRunOutput>;

  constructor(
    readonly taskId: string,
    readonly stepId: string,
    /** Leaves the step's question pending when the run is stopped for good while nobody hears it. */
    private readonly leave: () => void,
    private readonly waits: PeopleInFlight,
  ) {
    this.#report = () => {};
  }

  /** What the run is stopped by. */
  get signal(): AbortSignal {
    return this.#abort.signal;
  }

  /** The step's activity, told to the tree that hears the run now (a restored one after a passivation). */
  report(activity: StepActivity): void {
    this.#report(this.taskId, activity);
  }

  /** Runs the step: `run` is given this wait, whose signal stops it and whose `report` tells its activity. */
  start(run: (wait: PersonWait) => Promise<HumanRunOutput>): Promise<HumanRunOutput> {
    this.outcome = run(this);
    // Nobody may hear a run that ends while its task sleeps and is then abandoned: its failure is nobody's to handle.
    this.outcome.then(
      () => this.#ended(),
      () => this.#ended(),
    );
    return this.outcome;
  }

  /** The actor whose `signal` stops the run hears it from now on; its activity goes through `report`. */
  heardBy(signal: AbortSignal, report: Report): void {
    this.#unhear();
    this.#report = report;
    // Ended while its task slept: the restored actor takes the outcome, and nothing is left to stop.
    if (this.#settled) {
      this.waits.forget(this);
      return;
    }
    const forward = () => this.#abort.abort(signal.reason);
    if (signal.aborted) {
      forward();
      return;
    }
    signal.addEventListener('abort', forward, { once: true });
    this.#heard = { signal, forward };
  }

  /** Its task is being passivated: the stop of the actor hearing it leaves the run going. */
  detach(): void {
    this.#unhear();
  }

  /** Whether an actor hears the run now and it has not ended. */
  get heard(): boolean {
    return this.#heard !== undefined && !this.#settled;
  }

  /** Stops the run for good, its question left pending: its task ended here before a restored step adopted it. */
  abandon(): void {
    this.waits.forget(this);
    if (this.#settled) return;
    this.leave();
    this.#abort.abort(new Error('the task was let go here before its human step was taken up again'));
  }

  #ended(): void {
    this.#settled = true;
    // Heard, its actor takes the outcome; asleep, its task is woken and the step restored adopts it.
    if (this.#heard) {
      this.#unhear();
      this.waits.forget(this);
    } else this.waits.mustHear(this.taskId);
  }

  #unhear(): void {
    if (!this.#heard) return;
    this.#heard.signal.removeEventListener('abort', this.#heard.forward);
    this.#heard = undefined;
  }
}

/**
 * The `human` steps of a runner's tasks whose run is under way, by task: what lets a task waiting on a person be
 * passivated (its actor tree stopped, see `task/passivation.ts`) while its question stays asked. Like the sends in
 * flight (`sendsInFlight.ts`), the runs of tasks that are never passivated are kept too, each only while it runs.
 */
export class PeopleInFlight {
  readonly #waits = new Map<string, PersonWait | PersonWait[]>();
  /** Told when a passivated task's human step has an outcome: its task is woken to take it. */
  onMustHear: (taskId: string) => void = () => {};

  /** A new run of a task's human step, heard by the actor whose `signal` stops it; kept until it ends. */
  start(
    taskId: string,
    stepId: string,
    heard: { signal: AbortSignal; report: Report; leave: () => void },
  ): PersonWait {
    const wait = new PersonWait(taskId, stepId, heard.leave, this);
    wait.heardBy(heard.signal, heard.report);
    const kept = this.#waits.get(taskId);
    this.#waits.set(taskId, kept === undefined ? wait : [...this.#of(taskId), wait]);
    return wait;
  }

  /**
   * The run under way of a passivated task's human step, heard by the restored actor whose `signal` stops it from now
   * on: its outcome; undefined when there is none (the step is run anew).
   */
  adopt(
    taskId: string,
    stepId: string,
    signal: AbortSignal,
    report: Report,
  ): Promise<HumanRunOutput> | undefined {
    const wait = this.#of(taskId).find((w) => w.stepId === stepId && !w.heard);
    if (!wait) return undefined;
    wait.heardBy(signal, report);
    return wait.outcome;
  }

  /** Whether the task's step `stepId` waits here, heard by a live actor: its task may be passivated meanwhile. */
  waiting(taskId: string, stepId: string): boolean {
    return this.#of(taskId).some((w) => w.stepId === stepId && w.heard);
  }

  /** The task's tree is about to be stopped for its passivation: each of its steps' runs goes on, unheard. */
  detach(taskId: string): void {
    for (const wait of this.#of(taskId)) wait.detach();
  }

  /** The task's actor ended (or failed) here: a run of it that no restored step adopted is stopped, left pending. */
  abandon(taskId: string): void {
    for (const wait of this.#of(taskId)) if (!wait.heard) wait.abandon();
  }

  /** Runs under way now, for a test or a measurement. */
  get size(): number {
    let size = 0;
    for (const kept of this.#waits.values()) size += Array.isArray(kept) ? kept.length : 1;
    return size;
  }

  /** @internal */
  mustHear(taskId: string): void {
    this.onMustHear(taskId);
  }

  /** @internal */
  forget(wait: PersonWait): void {
    const left = this.#of(wait.taskId).filter((w) => w !== wait);
    if (left.length === 0) this.#waits.delete(wait.taskId);
    else this.#waits.set(wait.taskId, left.length === 1 ? (left[0] as PersonWait) : left);
  }

  #of(taskId: string): PersonWait[] {
    const kept = this.#waits.get(taskId);
    return kept === undefined ? [] : Array.isArray(kept) ? kept : [kept];
  }
}
