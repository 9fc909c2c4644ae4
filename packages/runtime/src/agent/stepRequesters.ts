import type { AgentStepReply, AgentStepRequest, StepHeartbeat } from '@troupe/protocol';
import type { CallerCheckpoint } from '../durable/callerCheckpoint.ts';
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
  /** Its workflow's checkpoint, which a run this delivery starts writes its journal after (see `LocalStepHooks`). */
  readonly checkpoint?: CallerCheckpoint | undefined;
}

export const isLocalDelivery = (delivery: Delivery<AgentStepRequest>): delivery is LocalDelivery =>
  'activity' in delivery;

/** One requester of a step: a delivery over the bus, or one in this process. */
interface Requester {
  readonly delivery: Delivery<AgentStepRequest>;
  /** Over the bus: heartbeats in a row that found its inbox gone. */
  misses: number;
  /** In this process: the last heartbeat it was told of; before any, as good as the plain one (nothing waited on). */
  told: StepHeartbeat | undefined;
}

/** A requester that waits on an inbox: its heartbeats go out on NATS. */
const isRemote = (delivery: Delivery<AgentStepRequest>): boolean =>
  !isLocalDelivery(delivery) && delivery.reply !== undefined;

/** Whether two heartbeats of a step say the same: whom it waits on, and whether its model call has lasted. */
const sameNews = (a: StepHeartbeat | undefined, b: StepHeartbeat): boolean =>
  a?.waitingFor?.kind === b.waitingFor?.kind &&
  a?.waitingFor?.id === b.waitingFor?.id &&
  a?.waitingOnModel === b.waitingOnModel;

/**
 * Who waits for a step's reply: the delivery that brought the step and the resends that joined it, each with the
 * heartbeats in a row that found its inbox gone; a requester in this process, with what it was last told. Most
 * steps have one requester all their run: one entry in a list, no maps.
 */
export class StepRequesters {
  readonly #requesters: Requester[];
  #remote = false;

  constructor(first: Delivery<AgentStepRequest>) {
    // Made with its one entry: a list grown from empty by `push` reserves room for 17.
    this.#requesters = [{ delivery: first, misses: 0, told: undefined }];
    this.#remote = isRemote(first);
  }

  /** A requester waits on an inbox, or did: the step's heartbeats go out on NATS. */
  get remote(): boolean {
    return this.#remote;
  }

  /** A requester in this process waits for the step: it is waited for, though no inbox is. */
  get local(): boolean {
    return this.#requesters.some(({ delivery }) => isLocalDelivery(delivery));
  }

  /** A resend of the step joins: it waits for the same reply. */
  add(delivery: Delivery<AgentStepRequest>): void {
    const known = this.#requesters.find((requester) => requester.delivery === delivery);
    if (known) {
      known.misses = 0;
      known.told = undefined;
    } else this.#requesters.push({ delivery, misses: 0, told: undefined });
    if (isRemote(delivery)) this.#remote = true;
  }

  /** A requester in this process left (its workflow left the step); returns whether anyone still waits. */
  remove(delivery: LocalDelivery): boolean {
    const at = this.#requesters.findIndex((requester) => requester.delivery === delivery);
    if (at >= 0) this.#requesters.splice(at, 1);
    return this.#requesters.length > 0;
  }

  /** A heartbeat that found `inbox` gone counts against its requester; one that got through clears it. */
  heard(inbox: string, listening: boolean): void {
    for (const requester of this.#requesters) {
      if (isLocalDelivery(requester.delivery) || requester.delivery.reply !== inbox) continue;
      requester.misses = listening ? 0 : requester.misses + 1;
    }
  }

  /** Where heartbeats go: the inboxes not found gone (their workflow died, or sent the step elsewhere). */
  inboxes(): string[] {
    return this.#requesters.flatMap(({ delivery, misses }) =>
      isRemote(delivery) && delivery.reply !== undefined && misses < MISSES_TO_DROP ? [delivery.reply] : [],
    );
  }

  /** What a heartbeat says now reaches each requester in this process it is news to. */
  report(heartbeat: StepHeartbeat): void {
    for (const requester of this.#requesters) {
      const { delivery } = requester;
      if (!isLocalDelivery(delivery) || sameNews(requester.told, heartbeat)) continue;
      requester.told = heartbeat;
      delivery.activity(heartbeat);
    }
  }

  /**
   * Every requester seen gets the reply, those over the bus first: one whose inbox seemed gone may be back after a
   * reconnect.
   */
  respond(reply: AgentStepReply): void {
    for (const { delivery } of this.#requesters) if (!isLocalDelivery(delivery)) delivery.respond(reply);
    for (const { delivery } of this.#requesters) if (isLocalDelivery(delivery)) delivery.respond(reply);
  }
}
