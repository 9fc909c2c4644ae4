import type { AgentStepReply, AgentStepRequest, StepHeartbeat } from '@troupe/protocol';
import type { Delivery } from '../transport/bus.ts';

/** Heartbeats in a row that must find a requester's inbox gone before it counts as gone (not a reconnect blip). */
const MISSES_TO_DROP = 2;

/**
 * A step taken by a workflow in this process (see `localSteps.ts`): it waits on no inbox, and hears what a heartbeat
 * would have said (whom the step waits on, a model call that lasts) through `activity`, only when that changes.
 */
export interface LocalDelivery extends Delivery<AgentStepRequest> {
  readonly activity: (heartbeat: StepHeartbeat) => void;
  /** Its workflow left the step before it was taken (it waited for an earlier run to unwind): nobody waits for it. */
  left?: boolean;
}

export const isLocalDelivery = (delivery: Delivery<AgentStepRequest>): delivery is LocalDelivery =>
  'activity' in delivery;

/**
 * Who waits for a step's reply: the delivery that brought the step and the resends that joined it, each with the
 * heartbeats in a row that found its inbox gone; a requester in this process, with what it was last told.
 */
export class StepRequesters {
  readonly #misses = new Map<Delivery<AgentStepRequest>, number>();
  /** The requesters in this process, each with the heartbeat it was last told of (as JSON). */
  readonly #local = new Map<LocalDelivery, string>();
  #remote = false;

  constructor(first: Delivery<AgentStepRequest>) {
    this.add(first);
  }

  /** A requester waits on an inbox, or did: the step's heartbeats go out on NATS. */
  get remote(): boolean {
    return this.#remote;
  }

  /** A requester in this process waits for the step: it is waited for, though no inbox is. */
  get local(): boolean {
    return this.#local.size > 0;
  }

  /** A resend of the step joins: it waits for the same reply. */
  add(delivery: Delivery<AgentStepRequest>): void {
    if (isLocalDelivery(delivery)) {
      this.#local.set(delivery, JSON.stringify({ stepId: delivery.value.stepId, heartbeat: true }));
      return;
    }
    this.#misses.set(delivery, 0);
    if (delivery.reply !== undefined) this.#remote = true;
  }

  /** A requester in this process left (its workflow left the step); returns whether anyone still waits. */
  remove(delivery: LocalDelivery): boolean {
    this.#local.delete(delivery);
    return this.#local.size > 0 || this.#misses.size > 0;
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

  /** What a heartbeat says now reaches each requester in this process it is news to. */
  report(heartbeat: StepHeartbeat): void {
    if (this.#local.size === 0) return;
    const said = JSON.stringify(heartbeat);
    for (const [requester, last] of this.#local) {
      if (last === said) continue;
      this.#local.set(requester, said);
      requester.activity(heartbeat);
    }
  }

  /** Every requester seen gets the reply: one whose inbox seemed gone may be back after a reconnect. */
  respond(reply: AgentStepReply): void {
    for (const requester of this.#misses.keys()) requester.respond(reply);
    for (const requester of this.#local.keys()) requester.respond(reply);
  }
}
