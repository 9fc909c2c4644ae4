import { ByTask } from './byTask.ts';
import type { StepCallEvent } from './stepCall.ts';

/** What a send in flight tells its step call: every event of the send, in order. */
type Hear = (event: StepCallEvent) => void;

/** An event of the send, and what must happen right before its call hears it (see {@link SendInFlight.tell}). */
interface Kept {
  event: StepCallEvent;
  heard?: (() => void) | undefined;
}

/**
 * A step's send while its request is under way, as {@link SendsInFlight} keeps it: the send's events go to the step
 * call that hears it, or, while its task is passivated, wait here for the call restored to adopt it.
 */
export class SendInFlight {
  #hear: Hear | undefined;
  #waiting: Kept[] = [];
  /** The heartbeat the call last heard, as a key of what it says (what the step waits on), to tell a change. */
  #said = '';
  /** The request has settled: once its call has heard that, nothing of the send is left to adopt. */
  #settled = false;
  /** Its task is being passivated: the call's stop leaves the send going, unheard, for a restored call to adopt. */
  #detached = false;
  /** Its call was stopped for good, or its task ended unadopted: what it kept is heard by nobody. */
  #over = false;

  constructor(
    readonly taskId: string,
    readonly stepId: string,
    /** Runs what stopping the send runs when its call is stopped for good: the request's abort among it. */
    private readonly end: () => void,
    private readonly sends: SendsInFlight,
  ) {}

  /**
   * The send's events go to `hear` from now on: those that came meanwhile first, in order (once its woken task's
   * signals are delivered, when it is woken; see {@link SendsInFlight.waking}).
   */
  heardBy(hear: Hear): void {
    this.#hear = hear;
    this.#detached = false;
    if (!this.sends.isWaking(this.taskId)) this.replay();
  }

  /**
   * @internal Gives its call the events that came while nobody heard them, each after what must happen before it is
   * heard; none once the call was stopped for good, by one of them or otherwise (a `join: first` ended by another
   * branch's kept reply, replayed first).
   */
  replay(): void {
    const hear = this.#hear;
    if (!hear) return;
    const waiting = this.#waiting.splice(0);
    for (const { event, heard } of waiting) {
      if (this.#over) return;
      heard?.();
      hear(event);
    }
    if (this.#settled) this.sends.forget(this);
  }

  /**
   * An event of the send: to its call, or kept for the call to come, waking its task if the call must act on it.
   * `heard` runs right before the call hears it, if one does: now, or once a woken task's call adopts the send (a
   * local step's output is owed to the task's record from then, not while its task sleeps: see `stepCallSend.ts`).
   */
  tell(event: StepCallEvent, heard?: () => void): void {
    const said = event.type === 'heartbeat' ? saidBy(event) : undefined;
    if (this.#hear && this.#waiting.length === 0) {
      if (said !== undefined) this.#said = said;
      heard?.();
      this.#hear(event);
      return;
    }
    // A heartbeat that says what the last one said changes nothing for the call: only the latest is kept.
    if (said !== undefined && said === this.#said) {
      const last = this.#waiting.at(-1);
      if (last?.event.type === 'heartbeat') this.#waiting[this.#waiting.length - 1] = { event, heard };
      else this.#waiting.push({ event, heard });
      return;
    }
    if (said !== undefined) this.#said = said;
    this.#waiting.push({ event, heard });
    this.sends.mustHear(this.taskId);
  }

  /** @internal Its task is being passivated: the stop of its call to come leaves the send going. */
  detach(): void {
    this.#hear = undefined;
    this.#detached = true;
  }

  /** Its call is stopped: for good (the request is stopped too), or, detached, for its task's passivation. */
  stopped(): void {
    if (this.#detached) return;
    this.#drop();
    this.sends.forget(this);
    this.end();
  }

  /** What it kept is heard by nobody now. */
  #drop(): void {
    this.#over = true;
    this.#waiting = [];
  }

  /** The request settled and its call heard it: nothing of it is left to adopt. */
  settled(): void {
    this.#settled = true;
    if (this.#hear) this.sends.forget(this);
  }

  /** @internal Whether a call hears it. */
  get heard(): boolean {
    return this.#hear !== undefined;
  }

  /** @internal Stops the request for good: its task ended before a call adopted it. */
  abandon(): void {
    this.#drop();
    this.sends.forget(this);
    this.end();
  }
}

/** What a heartbeat says the step does: its change is what a call reports (see `stepCallRules.ts`). */
function saidBy(event: Extract<StepCallEvent, { type: 'heartbeat' }>): string {
  const { waitingFor, waitingOnModel } = event.heartbeat;
  return waitingFor ? `person:${waitingFor.id}` : waitingOnModel ? 'model' : 'agent';
}

/**
 * The step sends in flight of a runner's tasks, by task and step id: what lets a task be passivated (its actor tree
 * stopped while it only waits, see `task/passivation.ts`) without its send. A step call restored from the passivated
 * task's snapshot adopts the send under way rather than send the step again, which would start a second run of it on
 * a host of this process. Sends of tasks that are not passivated are kept too (a send cannot know its task's future),
 * each only while its request is under way.
 */
export class SendsInFlight {
  /** By task: one send, or the sends of its steps at work at once (a parallel step's). */
  readonly #sends = new ByTask<SendInFlight>();
  /** Tasks woken whose new actor is starting: their sends' events wait until its signals are delivered. */
  readonly #waking = new Set<string>();
  /** Told when a passivated task's send has an event its call must hear: its task is woken. */
  onMustHear: (taskId: string) => void = () => {};

  /** A new send, kept under its task and step until it ends (in place of one it replaces); `end` stops its request. */
  start(taskId: string, stepId: string, end: () => void): SendInFlight {
    const send = new SendInFlight(taskId, stepId, end, this);
    this.#sends.add(send, (kept) => kept.stepId === stepId);
    return send;
  }

  /** The send of a passivated task's step, for its restored call to adopt; undefined when there is none. */
  adopt(taskId: string, stepId: string): SendInFlight | undefined {
    return this.#sends.of(taskId).find((send) => send.stepId === stepId);
  }

  /** The task's tree is about to be stopped for its passivation: each of its sends goes on when its call stops. */
  detach(taskId: string): void {
    for (const send of this.#sends.of(taskId)) send.detach();
  }

  /**
   * The task is woken and its new actor starts: the events its sends kept wait for {@link started}, so the signals
   * that woke it or came meanwhile reach it first (a cancel before the reply it overtook).
   */
  waking(taskId: string): void {
    this.#waking.add(taskId);
  }

  /** The woken task's new actor has started and heard its signals: its sends give their calls what they kept. */
  started(taskId: string): void {
    this.#waking.delete(taskId);
    for (const send of this.#sends.of(taskId)) send.replay();
  }

  /** The task's actor ended (or failed) here: a send of it that no call adopted is stopped for good. */
  abandon(taskId: string): void {
    this.#waking.delete(taskId);
    for (const send of this.#sends.of(taskId)) if (!send.heard) send.abandon();
  }

  /** Sends under way now, for a test or a measurement. */
  get size(): number {
    return this.#sends.size;
  }

  /** @internal */
  isWaking(taskId: string): boolean {
    return this.#waking.has(taskId);
  }

  /** @internal */
  mustHear(taskId: string): void {
    this.onMustHear(taskId);
  }

  /** @internal */
  forget(send: SendInFlight): void {
    this.#sends.forget(send);
  }
}
