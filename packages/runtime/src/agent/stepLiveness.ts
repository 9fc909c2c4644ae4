import type { AgentStepRequest, StepHeartbeat } from '@troupe/protocol';
import type { HumanGate } from '../approvals/humanGate.ts';
import type { Clock } from '../events/clock.ts';
import type { Logger } from '../logging/index.ts';
import type { HeartbeatSender } from '../transport/heartbeatSender.ts';
import type { StepRequesters } from './stepRequesters.ts';

/**
 * Heartbeats in a row with nobody waiting after which a step is stopped: 50 s at the default 5 s, longer than
 * the default ack wait (30 s), so a coordinator that resumes the task usually resends the step in time to join.
 */
const ORPHANED_AFTER = 10;
/**
 * How long a model call runs before the step's requesters are told it waits on the model (the workflow then parks
 * the task and starts another in its working slot). Quicker calls count as work and are never reported; real model
 * calls seldom are.
 */
const MODEL_WAIT_REPORT_MS = 100;

/** What a step's heartbeats need from its host. */
export interface StepLivenessServices {
  clock: Clock;
  heartbeats: HeartbeatSender;
  /** Whom a step waits on, and where its pending requests are left when nobody waits for the step any more. */
  human?: HumanGate | undefined;
  logger: Logger;
}

/** What a step's liveness stops when nobody waits for the step any more: its run. */
export interface OrphanedStop {
  stop(stop: { why: 'orphaned' }): void;
}

/**
 * A running step's heartbeats: where they go (the requesters still listening), what they say (whom the step waits
 * on, whether its model call has lasted), and when nobody has waited for the step for {@link ORPHANED_AFTER}
 * heartbeats, its run is stopped as `orphaned`: its journal keeps what it did, for the run that gets the step next.
 */
export class StepLiveness {
  readonly #request: AgentStepRequest;
  readonly #requesters: StepRequesters;
  readonly #services: StepLivenessServices;
  readonly #run: OrphanedStop;
  /** When a requester was last known to listen. */
  #lastWaitedFor: number;
  #isOrphaned = false;
  /**
   * While heartbeats go out over NATS, their interval (0 while they do not) and the timer of the next: a field and a
   * timer, not `every`'s closures, for a parked step.
   */
  #tickMs = 0;
  #tickTimer: unknown;
  /** The model call in flight, if one is: not reported yet (its timer runs), or reported as lasting. */
  #model: 'waiting' | 'reported' | undefined;
  #modelTimer: unknown;

  constructor(
    request: AgentStepRequest,
    requesters: StepRequesters,
    services: StepLivenessServices,
    run: OrphanedStop,
  ) {
    this.#request = request;
    this.#requesters = requesters;
    this.#services = services;
    this.#run = run;
    this.#lastWaitedFor = services.clock.now();
  }

  /** Nobody waited for the step any more, so it was stopped. */
  get orphaned(): boolean {
    return this.#isOrphaned;
  }

  /**
   * While the step runs, its requesters hear from this host (if they asked to), so they can tell a long step from
   * a dead worker; the first heartbeat goes at once (its acknowledgement is what lets
   * a host on another NATS account tell a requester gone later: see `stillThere`). A requester in this
   * process is sent no heartbeat: it hears only what changes (see `StepRequesters.report`).
   */
  start(): void {
    const heartbeatMs = this.#request.heartbeatMs;
    if (heartbeatMs === undefined || !this.#requesters.remote) return;
    this.#tick(heartbeatMs);
  }

  /** A resend asking for heartbeats every `heartbeatMs` joined: it hears one now (the first over NATS, perhaps). */
  joined(heartbeatMs: number): void {
    if (this.#tickMs === 0 && this.#requesters.remote) this.#tick(heartbeatMs);
    else this.beat(heartbeatMs);
  }

  /** Beats now at the interval the step's request asked for, if it asked for heartbeats (what they say changed). */
  beatAsAsked(): void {
    if (this.#request.heartbeatMs !== undefined) this.beat(this.#request.heartbeatMs);
  }

  #tick(heartbeatMs: number): void {
    this.#tickMs = heartbeatMs;
    this.#nextTick();
    this.beat(heartbeatMs);
  }

  #nextTick(): void {
    this.#tickTimer = this.#services.clock.setTimeout(() => {
      if (this.#tickMs === 0) return;
      this.#nextTick();
      this.beat(this.#tickMs);
    }, this.#tickMs);
  }

  /**
   * Tells the requesters in this process what the step's heartbeat says, if it changed, and the heartbeat sender,
   * once heartbeats go over NATS, where they go and what they say; finds the step orphaned when nobody has listened
   * for {@link ORPHANED_AFTER} heartbeats of `heartbeatMs`.
   */
  beat(heartbeatMs: number): void {
    const { clock, heartbeats, human, logger } = this.#services;
    const { stepId, taskId } = this.#request;
    const waitingFor = human?.waitingOn?.(stepId);
    const heartbeat: StepHeartbeat = {
      stepId,
      heartbeat: true,
      ...(waitingFor ? { waitingFor } : {}),
      ...(this.#model === 'reported' ? { waitingOnModel: true as const } : {}),
    };
    this.#requesters.report(heartbeat);
    if (this.#tickMs === 0) return;
    const inboxes = this.#requesters.inboxes();
    heartbeats.beat(stepId, inboxes, heartbeatMs, heartbeat);
    if (inboxes.length > 0 || this.#requesters.local) this.#lastWaitedFor = clock.now();
    else if (clock.now() - this.#lastWaitedFor >= ORPHANED_AFTER * heartbeatMs && !this.#isOrphaned) {
      this.#isOrphaned = true;
      logger.warn(
        { stepId, taskId },
        `nobody waits for step ${stepId} any more (its workflow died or sent it elsewhere); stopping it here`,
      );
      // Its approvals and questions stay pending for the run that gets the step next.
      human?.leavePending?.(stepId);
      this.#run.stop({ why: 'orphaned' });
    }
  }

  /**
   * A model call of the step starts or ends. One that lasts is reported in the next heartbeat, sent then; its end is
   * reported at once too, so the workflow counts the task as working again without waiting for a heartbeat.
   */
  modelWait(waiting: boolean): void {
    const heartbeatMs = this.#request.heartbeatMs;
    if (heartbeatMs === undefined) return;
    const { clock } = this.#services;
    clock.clearTimeout(this.#modelTimer);
    this.#modelTimer = undefined;
    if (waiting) {
      this.#model = 'waiting';
      this.#modelTimer = clock.setTimeout(() => {
        // Fired, the timer is let go: a step parked on its model keeps no spent Timeout.
        this.#modelTimer = undefined;
        this.#model = 'reported';
        this.beat(heartbeatMs);
      }, MODEL_WAIT_REPORT_MS);
      return;
    }
    const ended = this.#model;
    this.#model = undefined;
    if (ended === 'reported') this.beat(heartbeatMs);
  }

  /** The step has ended: no timer of it is left. */
  end(): void {
    this.#tickMs = 0;
    this.#services.clock.clearTimeout(this.#tickTimer);
    this.#services.clock.clearTimeout(this.#modelTimer);
  }
}
