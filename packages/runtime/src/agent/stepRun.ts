import { type AgentStepRequest, isRetryable, type StepErrorCode, type ToldMessage } from '@troupe/protocol';
import type { Delivery } from '../transport/bus.ts';
import type { StepStop } from './agentMachine.ts';
import type { AgentStep } from './agentStep.ts';
import type { RecentReplies } from './recentReplies.ts';
import { StepLiveness, type StepLivenessServices } from './stepLiveness.ts';
import { type LocalDelivery, StepRequesters } from './stepRequesters.ts';

/**
 * Whether a resend of a step that failed with `code` runs it again rather than getting this reply: a failure the
 * workflow retries, or a run stopped before its end (by this host stopping, or for want of a requester).
 */
const runsAgain = (code: StepErrorCode): boolean => isRetryable(code) || code === 'aborted';

/** How long a run whose workflow in this process left it goes on, for its task's end to stop it (see `leave`). */
export const LEFT_GRACE_MS = 2_000;

/** What a run of a step needs from its host. */
export interface StepRunServices extends StepLivenessServices {
  /** Where a reply that ended the step is kept, for a resend whose first reply was lost. */
  recent: RecentReplies;
  /** Told once the run's reply has gone out and its timers are stopped. */
  ended(run: StepRun): void;
}

/**
 * One run of a step on this host: the agent step under way, who waits for its reply, its heartbeats and its
 * stop. Its reply goes to every requester; a reply that ended the step is kept for resends.
 */
export class StepRun {
  readonly request: AgentStepRequest;
  /** Settles once the reply has gone to the requesters and the run has ended. */
  readonly done: Promise<void>;
  readonly #agentStep: AgentStep;
  readonly #requesters: StepRequesters;
  readonly #liveness: StepLiveness;
  readonly #services: StepRunServices;
  /** The timer that stops a run its requesters in this process left (see `leave`). */
  #left: unknown;
  /** Stopped since its requesters in this process left it and nobody took it up again (see `leave`). */
  #abandoned = false;
  #stopped = false;

  constructor(delivery: Delivery<AgentStepRequest>, agentStep: AgentStep, services: StepRunServices) {
    const request = delivery.value;
    this.request = request;
    this.#agentStep = agentStep;
    this.#services = services;
    this.#requesters = new StepRequesters(delivery);
    this.#liveness = new StepLiveness(request, this.#requesters, services, this);
    this.#liveness.start();
    // One callback for the reply and the run's end (not a `finally` after it): a parked run keeps one promise less.
    this.done = agentStep.reply.then(
      (reply) => {
        try {
          this.#requesters.respond(reply);
          // A run stopped for want of a requester, or a failure a resend retries, did not end the step: the next
          // request for it runs it again (from its journal) rather than getting this reply.
          if (!this.orphaned && (reply.ok || !runsAgain(reply.error.code)))
            services.recent.remember(request.stepId, agentStep.reply);
        } finally {
          this.#end();
        }
      },
      (error: unknown) => {
        this.#end();
        throw error;
      },
    );
  }

  /** Its agent actor is parked while its model call waits (see `AgentRun`). */
  get parked(): boolean {
    return this.#agentStep.parked === true;
  }

  /** Sent a stop already (the task ended, nobody waits, or this host is stopping). */
  get stopped(): boolean {
    return this.#stopped;
  }

  /**
   * Stopped because nobody waited for it any more (its requesters' inboxes are gone, or its workflow here left it):
   * it is unwinding, and a resend starts a new run after it rather than getting the `aborted` reply meant for nobody.
   */
  get orphaned(): boolean {
    return this.#abandoned || this.#liveness.orphaned;
  }

  /**
   * The same step sent again (its first reply was lost to a reconnect) waits for this run's reply. The messages it
   * carries are the run's too (each read once): their `task.told` events may never have reached this host, and the
   * workflow counts them read only if this run's reply says so.
   */
  join(delivery: Delivery<AgentStepRequest>): void {
    // Someone waits for it again: a run its workflow here had left goes on.
    this.#services.clock.clearTimeout(this.#left);
    this.#left = undefined;
    this.#requesters.add(delivery);
    for (const message of delivery.value.told ?? []) this.tell(message);
    const heartbeatMs = delivery.value.heartbeatMs;
    if (heartbeatMs !== undefined) this.#liveness.joined(heartbeatMs);
  }

  /**
   * A requester in this process left (its workflow left the step: cancelled, timed out, a branch stopped). A run
   * nobody else waits for stops soon: at its task's end, which follows a cancel at once here and gives the run the
   * task's ending (what it asked people is closed saying how the task ended), or {@link LEFT_GRACE_MS} later, as one
   * whose requester is gone would after its heartbeats (what it asked people then stays pending for its next run).
   */
  leave(delivery: LocalDelivery): void {
    if (this.#requesters.remove(delivery) || this.#stopped) return;
    const { clock, human } = this.#services;
    clock.clearTimeout(this.#left);
    this.#left = clock.setTimeout(() => {
      this.#left = undefined;
      if (this.#stopped) return;
      this.#abandoned = true;
      human?.leavePending?.(this.request.stepId);
      this.stop({ why: 'aborted' });
    }, LEFT_GRACE_MS);
  }

  /** Its heartbeats went over NATS (a requester waited on an inbox): the sender has timers of it to stop. */
  get beatsOverNats(): boolean {
    return this.#requesters.remote;
  }

  /** What a heartbeat to `inbox` found: whether its requester still listens. */
  heard(inbox: string, listening: boolean): void {
    this.#requesters.heard(inbox, listening);
  }

  /** The step started or stopped waiting for a person: its requesters hear it at once, not at the next heartbeat. */
  waitingChanged(): void {
    this.#liveness.beatAsAsked();
  }

  /** The step's model call started (true) or ended (false). */
  modelWait(waiting: boolean): void {
    this.#liveness.modelWait(waiting);
  }

  /** The step's task was paused: the step stops after its current model or tool call (see `AgentStep.pause`). */
  pause(): void {
    if (!this.#stopped) this.#agentStep.pause?.();
  }

  /** A person told the step's task something: its agent reads it before its next model call. */
  tell(message: ToldMessage): void {
    if (!this.#stopped) this.#agentStep.tell?.(message);
  }

  /** The run's reply has gone out (or could not): its timers stop, and its host lets it go. */
  #end(): void {
    this.#services.clock.clearTimeout(this.#left);
    this.#liveness.end();
    this.#services.ended(this);
  }

  /** Sends the agent step a stop, once: the first reason is the one its reply gives. */
  stop(stop: StepStop): void {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#agentStep.stop(stop);
  }
}
