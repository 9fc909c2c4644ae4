import type { Bus } from '@troupe/runtime';

/** A send whose reply may be lost with the connection: one over NATS, still waiting. */
export interface HearsReconnects {
  reconnected(): void;
}

/**
 * The sends of one step-call logic that wait on a reply over NATS, told of the connection's reconnects through one
 * listener on the bus for all of them: made with the first send, dropped with the last, so a bus with no send in
 * flight has none of theirs. A parked task's send costs an entry in a set here, not a listener of its own.
 *
 * A send added while a reconnect is told (a call's send again after it) does not hear that reconnect, as a listener
 * added to the bus then would not.
 */
export class StepCallReconnects {
  readonly #bus: Bus;
  readonly #sends = new Set<HearsReconnects>();
  #unlisten: (() => void) | undefined;

  constructor(bus: Bus) {
    this.#bus = bus;
  }

  /** `send` hears the reconnects from now on, until {@link StepCallReconnects.delete}. */
  add(send: HearsReconnects): void {
    this.#sends.add(send);
    this.#unlisten ??= this.#bus.onStatus((status) => {
      if (status.type === 'reconnect') this.#tell();
    });
  }

  delete(send: HearsReconnects): void {
    if (!this.#sends.delete(send) || this.#sends.size > 0) return;
    this.#unlisten?.();
    this.#unlisten = undefined;
  }

  #tell(): void {
    for (const send of [...this.#sends]) send.reconnected();
  }
}
