import type { ModelCallOutput } from './agentServices.ts';

/** Who hears a model call's end, before the actor holding it does. */
export interface ModelCallEnds {
  callEnded(call: ModelCallInFlight): void;
}

/**
 * One turn's model call under way, apart from the agent actor that asked for it, so the actor may be stopped while it
 * waits (its step parked, see `AgentRun`) and a new one adopt the call: the model is asked once, and its reply
 * reaches whichever actor holds the call when it lands. The model gets a signal of its own, which the actor holding
 * the call aborts by aborting its invocation's signal, as it would the model's; a parked step's actor is let go
 * without it ({@link detach}).
 */
export class ModelCallInFlight {
  readonly turn: number;
  /** The call's reply, with the messages told before it; the same promise for every actor that holds the call. */
  readonly reply: Promise<ModelCallOutput>;
  readonly #controller = new AbortController();
  /** The signal of the actor's invocation that holds the call now, whose abort aborts the call. */
  #holder: AbortSignal | undefined;
  /** How the holder's own promise of the reply is settled: the holder's invocation alone waits on it. */
  #resolve: ((reply: ModelCallOutput) => void) | undefined;
  #reject: ((error: unknown) => void) | undefined;
  #settled = false;

  /**
   * Asks the model (through `ask`, given the call's own signal); the actor that asked then {@link hold}s it. `ends`
   * hears the call's end before its holder does (a parked step is woken by it, and holds the call settled).
   */
  constructor(turn: number, ask: (signal: AbortSignal) => Promise<ModelCallOutput>, ends: ModelCallEnds) {
    this.turn = turn;
    this.reply = ask(this.#controller.signal);
    this.reply.then(
      (reply) => {
        this.#settled = true;
        ends.callEnded(this);
        this.#resolve?.(reply);
      },
      (error: unknown) => {
        this.#settled = true;
        ends.callEnded(this);
        this.#reject?.(error);
      },
    );
  }

  /**
   * An actor's invocation takes the call (the first, or one woken after a park): its abort aborts the call, and it
   * gets a promise of the reply of its own, which a detached holder's is no longer settled by: what waits on it (the
   * stopped actor) is not kept by the call.
   */
  hold(signal: AbortSignal): Promise<ModelCallOutput> {
    this.detach();
    if (signal.aborted) this.#controller.abort(signal.reason);
    else {
      signal.addEventListener('abort', this, { once: true });
      this.#holder = signal;
    }
    if (this.#settled) return this.reply;
    return new Promise((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
  }

  /** The actor holding the call lets it go without aborting it: it is about to be stopped, and the call goes on. */
  detach(): void {
    this.#holder?.removeEventListener('abort', this);
    this.#holder = undefined;
    this.#resolve = undefined;
    this.#reject = undefined;
  }

  /** The call is aborted with no actor to hold it: its step, parked, could not be woken. */
  abort(reason: unknown): void {
    this.detach();
    this.#controller.abort(reason);
  }

  /** The holder's invocation was aborted (its step stopped, or left its model call): so is the call. */
  handleEvent(): void {
    this.#controller.abort(this.#holder?.reason);
    this.#holder = undefined;
  }
}
