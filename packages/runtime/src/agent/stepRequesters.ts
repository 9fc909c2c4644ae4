import type { AgentStepReply, AgentStepRequest } from '@troupe/protocol';
import type { Delivery } from '../transport/bus.ts';

/** Heartbeats in a row that must find a requester's inbox gone before it counts as gone (not a reconnect blip). */
const MISSES_TO_DROP = 2;

/**
 * Who waits for a step's reply: the delivery that brought the step and the resends that joined it, each with the
 * heartbeats in a row that found its inbox gone.
 */
export class StepRequesters {
  readonly #misses = new Map<Delivery<AgentStepRequest>, number>();

  constructor(first: Delivery<AgentStepRequest>) {
    this.#misses.set(first, 0);
  }

  /** A resend of the step joins: it waits for the same reply. */
  add(delivery: Delivery<AgentStepRequest>): void {
    this.#misses.set(delivery, 0);
  }

  /** A heartbeat that found `inbox` gone counts against its requester; one that got through clears it. */
  heard(inbox: string, listening: boolean): void {
    for (const [requester, misses] of this.#misses) {
      if (requester.reply === inbox) this.#misses.set(requester, listening ? 0 : misses + 1);
    }
  }

  /** Where heartbeats go: the inboxes not found gone (their workflow died, or sent the step elsewhere). */
  inboxes(): string[] {
    return [...this.#misses].flatMap(([requester, misses]) =>
      requester.reply !== undefined && misses < MISSES_TO_DROP ? [requester.reply] : [],
    );
  }

  /** Every requester seen gets the reply: one whose inbox seemed gone may be back after a reconnect. */
  respond(reply: AgentStepReply): void {
    for (const requester of this.#misses.keys()) requester.respond(reply);
  }
}
