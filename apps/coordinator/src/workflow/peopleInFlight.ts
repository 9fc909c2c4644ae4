import type { StepActivity } from '@troupe/protocol';
import { ByTask } from './byTask.ts';
import type { HumanRunOutput } from './workflowTypes.ts';

/** Where a `human` step says what it does (that it waits on a person): its task's tree, as it is now. */
type Report = (taskId: string, activity: StepActivity) => void;

/** How a run of a human step ended: its output, or the error it failed with. */
type Ended = { ok: true; output: HumanRunOutput } | { ok: false; error: unknown };

/** The actor hearing a run now: what stops the run with it, where its activity goes, and how it is told the end. */
interface Hearer {
  signal: AbortSignal;
  forward: () => void;
  report: Report;
  resolve: (output: HumanRunOutput) => void;
  reject: (error: unknown) => void;
}

/**
 * What a hearer let go for its task's passivation is told: its actor is stopped, and nothing takes this. Made once:
 * an error made at each passivation took its stack trace each time (about 0.1 ms of CPU a task).
 */
const PASSIVATED = new Error('the task was passivated: its human step goes on outside its tree');

/**
 * A `human` step's wait on a person, as {@link PeopleInFlight} keeps it: the run of the step (its question asked or
 * taken up, and its wait for the answer or the deadline) goes on outside its task's actor tree, so the tree can be
 * stopped while the task is passivated and a step restored from its snapshot adopts the run under way — nobody is
 * asked twice, and the step's time counts from when it started.
 *
 * Nothing of the run holds the actor hearing it but its hearer entry, which is let go when the task is passivated: each
 * actor gets a promise of its own for the run's end, so the run's end does not hold a stopped actor's reactions.
 */
export class PersonWait {
  /** What stops the run: the actor hearing it stopped (its signal, forwarded), or the wait abandoned. */
  readonly #abort = new AbortController();
  #hearer: Hearer | undefined;
  #ended: Ended | undefined;
  /** What the run said it does while nobody heard it: told to the actor that hears it next. */
  #unheard: StepActivity | undefined;

  constructor(
    readonly taskId: string,
    readonly stepId: string,
    /** Leaves the step's question pending when the run is stopped for good while nobody hears it. */
    private readonly leave: () => void,
    private readonly waits: PeopleInFlight,
  ) {}

  /** What the run is stopped by. */
  get signal(): AbortSignal {
    return this.#abort.signal;
  }

  /** The step's activity, told to the tree that hears the run now, or kept for the one restored next. */
  report(activity: StepActivity): void {
    if (this.#hearer) this.#hearer.report(this.taskId, activity);
    else this.#unheard = activity;
  }

  /** Runs the step: `run` is given this wait, whose signal stops it and whose `report` tells its activity. */
  start(run: (wait: PersonWait) => Promise<HumanRunOutput>): void {
    run(this).then(
      (output) => this.#end({ ok: true, output }),
      (error: unknown) => this.#end({ ok: false, error }),
    );
  }

  /**
   * The actor whose `signal` stops the run hears it from now on, its activity going to `report`: the run's end, for
   * that actor.
   */
  heardBy(signal: AbortSignal, report: Report): Promise<HumanRunOutput> {
    this.detach();
    // Ended while its task slept: the restored actor takes the end, and nothing is left to stop.
    const ended = this.#ended;
    if (ended) {
      this.waits.forget(this);
      return ended.ok ? Promise.resolve(ended.output) : Promise.reject(ended.error);
    }
    if (signal.aborted) this.#abort.abort(signal.reason);
    return new Promise<HumanRunOutput>((resolve, reject) => {
      const forward = () => this.#abort.abort(signal.reason);
      signal.addEventListener('abort', forward, { once: true });
      this.#hearer = { signal, forward, report, resolve, reject };
      const unheard = this.#unheard;
      this.#unheard = undefined;
      if (unheard) report(this.taskId, unheard);
    });
  }

  /** Its task is being passivated: the stop of the actor hearing it leaves the run going, and it is let go. */
  detach(): void {
    const hearer = this.#hearer;
    if (!hearer) return;
    this.#hearer = undefined;
    hearer.signal.removeEventListener('abort', hearer.forward);
    hearer.reject(PASSIVATED);
  }

  /** Whether an actor hears the run now and it has not ended. */
  get heard(): boolean {
    return this.#hearer !== undefined && this.#ended === undefined;
  }

  /** Stops the run for good, its question left pending: its task ended here before a restored step adopted it. */
  abandon(): void {
    this.waits.forget(this);
    if (this.#ended) return;
    this.leave();
    this.#abort.abort(new Error('the task was let go here before its human step was taken up again'));
  }

  #end(ended: Ended): void {
    this.#ended = ended;
    const hearer = this.#hearer;
    // Asleep, its task is woken and the step restored takes the end (see heardBy).
    if (!hearer) {
      this.waits.mustHear(this.taskId);
      return;
    }
    this.#hearer = undefined;
    hearer.signal.removeEventListener('abort', hearer.forward);
    this.waits.forget(this);
    if (ended.ok) hearer.resolve(ended.output);
    else hearer.reject(ended.error);
  }
}

/**
 * The `human` steps of a runner's tasks whose run is under way, by task: what lets a task waiting on a person be
 * passivated (its actor tree stopped, see `task/passivation.ts`) while its question stays asked. Like the sends in
 * flight (`sendsInFlight.ts`), the runs of tasks that are never passivated are kept too, each only while it runs.
 */
export class PeopleInFlight {
  readonly #waits = new ByTask<PersonWait>();
  /** Told when a passivated task's human step has an outcome: its task is woken to take it. */
  onMustHear: (taskId: string) => void = () => {};

  /**
   * A new run of a task's human step (`run`), heard by the actor whose `signal` stops it and whose tree `report` tells;
   * kept until it ends, in place of an earlier run of the step, as a new send replaces one (`sendsInFlight.ts`). An
   * earlier run is only there while it ends, its actor stopped (nothing unheard is left once {@link adopt} found
   * none): kept beside the new one, it would be let go with it at a passivation, wake the task at its end, and be
   * adopted by the restored step in place of the run under way. `leave` leaves its question pending if it is stopped
   * for good while nobody hears it. Resolves with the run's end, for that actor.
   */
  start(
    taskId: string,
    stepId: string,
    heard: { signal: AbortSignal; report: Report; leave: () => void },
    run: (wait: PersonWait) => Promise<HumanRunOutput>,
  ): Promise<HumanRunOutput> {
    const wait = new PersonWait(taskId, stepId, heard.leave, this);
    this.#waits.add(wait, (kept) => kept.stepId === stepId);
    const outcome = wait.heardBy(heard.signal, heard.report);
    wait.start(run);
    return outcome;
  }

  /**
   * The run under way of a passivated task's human step, heard by the restored actor whose `signal` stops it from now
   * on: its end; undefined when there is none (the step is run anew).
   */
  adopt(
    taskId: string,
    stepId: string,
    signal: AbortSignal,
    report: Report,
  ): Promise<HumanRunOutput> | undefined {
    const wait = this.#waits.of(taskId).find((w) => w.stepId === stepId && !w.heard);
    return wait?.heardBy(signal, report);
  }

  /** Whether the task's step `stepId` waits here, heard by a live actor: its task may be passivated meanwhile. */
  waiting(taskId: string, stepId: string): boolean {
    return this.#waits.of(taskId).some((w) => w.stepId === stepId && w.heard);
  }

  /** The task's tree is about to be stopped for its passivation: each of its steps' runs goes on, unheard. */
  detach(taskId: string): void {
    for (const wait of this.#waits.of(taskId)) wait.detach();
  }

  /** The task's actor ended (or failed) here: a run of it that no restored step adopted is stopped, left pending. */
  abandon(taskId: string): void {
    for (const wait of this.#waits.of(taskId)) if (!wait.heard) wait.abandon();
  }

  /** Runs under way now, for a test or a measurement. */
  get size(): number {
    return this.#waits.size;
  }

  /** @internal */
  mustHear(taskId: string): void {
    this.onMustHear(taskId);
  }

  /** @internal */
  forget(wait: PersonWait): void {
    this.#waits.forget(wait);
  }
}
