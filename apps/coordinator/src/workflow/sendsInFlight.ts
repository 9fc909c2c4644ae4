import type { StepCallEvent } from './stepCall.ts';

/** What a send in flight tells its step call: every event of the send, in order. */
type Hear = (event: StepCallEvent) => void;

/**
 * A step's send while its request is under way, as {@link SendsInFlight} keeps it: the send's events go to the step
 * call that hears it, or, while its task is passivated, wait here for the call restored to adopt it.
 */
export class SendInFlight {
  #hear: Hear | undefined;
  #waiting: StepCallEvent[] = [];
  /** The heartbeat the call last heard, as a key of what it says (what the step waits on), to tell a change. */
  #said = '';
  /** The request has settled: once its call has heard that, nothing of the send is left to adopt. */
  #settled = false;

  constructor(
    readonly key: string,
    /** Runs what stopping the send runs when its call is stopped for good: the request's abort among it. */
    private readonly end: () => void,
    private readonly sends: SendsInFlight,
  ) {}

  /** The send's events go to `hear` from now on: those that came meanwhile first, in order. */
  heardBy(hear: Hear): void {
    this.#hear = hear;
    const waiting = this.#waiting.splice(0);
    for (const event of waiting) hear(event);
    if (this.#settled) this.sends.forget(this.key, this);
  }

  /** An event of the send: to its call, or kept for the call to come, waking its task if the call must act on it. */
  tell(event: StepCallEvent): void {
    const said = event.type === 'heartbeat' ? saidBy(event) : undefined;
    if (this.#hear) {
      if (said !== undefined) this.#said = said;
      this.#hear(event);
      return;
    }
    // A heartbeat that says what the last one said changes nothing for the call: only the latest is kept.
    if (said !== undefined && said === this.#said) {
      const last = this.#waiting.at(-1);
      if (last?.type === 'heartbeat') this.#waiting[this.#waiting.length - 1] = event;
      else this.#waiting.push(event);
      return;
    }
    if (said !== undefined) this.#said = said;
    this.#waiting.push(event);
    this.sends.woken(this.key);
  }

  /** Its call is stopped: for good (the request is stopped too), or for its task's passivation (it goes on, unheard). */
  stopped(passivating: boolean): void {
    if (passivating) {
      this.#hear = undefined;
      return;
    }
    this.sends.forget(this.key, this);
    this.end();
  }

  /** The request settled and its call heard it: nothing of it is left to adopt. */
  settled(): void {
    this.#settled = true;
    if (this.#hear) this.sends.forget(this.key, this);
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
  readonly #sends = new Map<string, SendInFlight>();
  readonly #passivating = new Set<string>();
  /** Told when a passivated task's send has an event its call must hear: its task is woken. */
  onWoken: (taskId: string) => void = () => {};

  /** The key of a task's step send. */
  static keyOf(taskId: string, stepId: string): string {
    return `${taskId}\u0000${stepId}`;
  }

  /** A new send, kept under its task and step until it ends; `end` stops its request for good. */
  start(taskId: string, stepId: string, end: () => void): SendInFlight {
    const key = SendsInFlight.keyOf(taskId, stepId);
    const send = new SendInFlight(key, end, this);
    this.#sends.set(key, send);
    return send;
  }

  /** The send of a passivated task's step, for its restored call to adopt; undefined when there is none. */
  adopt(taskId: string, stepId: string): SendInFlight | undefined {
    return this.#sends.get(SendsInFlight.keyOf(taskId, stepId));
  }

  /** Whether the task's tree is being stopped for its passivation (its sends go on). */
  passivating(taskId: string): boolean {
    return this.#passivating.has(taskId);
  }

  /** Runs `stop` (which stops the task's tree) with the task's sends kept going. */
  keepWhile(taskId: string, stop: () => void): void {
    this.#passivating.add(taskId);
    try {
      stop();
    } finally {
      this.#passivating.delete(taskId);
    }
  }

  /** Sends under way now, for a test or a measurement. */
  get size(): number {
    return this.#sends.size;
  }

  /** @internal */
  woken(key: string): void {
    this.onWoken(key.slice(0, key.indexOf('\u0000')));
  }

  /** @internal */
  forget(key: string, send: SendInFlight): void {
    if (this.#sends.get(key) === send) this.#sends.delete(key);
  }
}
