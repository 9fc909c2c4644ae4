import type { AgentStepReply } from '@troupe/protocol';
import { createActor, toPromise } from 'xstate';
import type {
  AgentActorInput,
  AgentContext,
  AgentEvent,
  AgentMachineInput,
  AgentOutput,
  StepStop,
} from './agentContext.ts';
import { timeLimit } from './agentLimits.ts';
import { agentMachine } from './agentMachine.ts';
import type { AgentStep } from './agentStep.ts';
import type { AgentActorRef, ParkedStep } from './stepActors.ts';
import type { StepContext } from './stepContext.ts';
import { toWireEvent } from './stepEvents.ts';
import { crashedReply, failedReply, toReply } from './stepReply.ts';
import type { ModelCallWatcher, StepServices } from './stepServices.ts';
import { offloadReply } from './stepValues.ts';

/**
 * How long an agent host lets a step's model call wait before it parks the step: as long as a coordinator waits before
 * it passivates a task waiting on the step, so a parked task's step is parked too, while a model call of milliseconds
 * (most of them) never is.
 */
export const DEFAULT_PARK_AFTER_MS = 5_000;

/**
 * How many of a host's steps may be awake waiting on their model before it parks them sooner (an active-entity limit):
 * with more, a step whose call has waited {@link CROWD_MIN_WAIT_MS} is parked without waiting for `parkAfterMs`. A
 * parked step keeps about half what an awake one does, and a park and a wake cost ~0.7 ms of CPU: a few hundred steps
 * waiting are cheaper awake, thousands are not.
 */
export const CROWD = 200;

/**
 * How long a step's model call waits before the step is parked while its host's crowd of waiting steps is over
 * {@link CROWD}: long enough that a call of milliseconds (most of them) never parks its step, crowd or not.
 */
export const CROWD_MIN_WAIT_MS = 1_000;

/**
 * A step's agent actor under way: its reply, and its stop and pause as events sent to it. While a model call waits
 * longer than the host's `parkAfterMs`, the step is parked: its actor is stopped (its model call goes on, held by the
 * step's services) and only its context kept, with a timer for its time limit. A new actor takes the step up from that
 * context when the reply lands, adopting the call (the model is asked once, `llm.request` is not announced again), or
 * when a stop or a pause comes, which it is then sent; its time limit ending wakes it with a stop. What the agent reads
 * when told something is kept outside the actor, so a message told to a parked step leaves it parked.
 *
 * On a host (`deps.actors`), each awake step waiting on its model counts in the host's crowd
 * (`StepActors.waitingOnModel`); while more than {@link CROWD} do, a step whose call has waited
 * {@link CROWD_MIN_WAIT_MS} is parked sooner than `parkAfterMs` (when that is longer).
 */
export class AgentRun implements AgentStep, ModelCallWatcher, ParkedStep {
  readonly reply: Promise<AgentStepReply>;
  readonly #step: StepContext;
  readonly #services: StepServices;
  /** When the first actor started, which the step's time limits count from. */
  readonly #startedAt: number;
  #settle: (reply: AgentStepReply | Promise<AgentStepReply>) => void = () => {};
  /** The actor running the step; undefined while it is parked. */
  #actor: AgentActorRef | undefined;
  /** The parked actor's context, while the step is parked. */
  #parked: AgentContext | undefined;
  /** While a model call waits: the timer that parks the step; while parked: the one of its time limit. */
  #timer: unknown;
  /** Whether the step counts in its host's crowd waiting on their model (awake, its call waiting). */
  #inCrowd = false;

  /** Starts the step's first actor; throws as spawning it does (`startAgentStep` replies `agent_crashed`). */
  constructor(step: StepContext, services: StepServices, input: AgentMachineInput) {
    this.#step = step;
    this.#services = services;
    this.#startedAt = step.deps.clock.now();
    this.reply = new Promise((resolve) => {
      this.#settle = resolve;
    });
    if ((step.deps.parkAfterMs ?? 0) > 0) services.watchModelCalls(this);
    this.#start(input);
  }

  get parked(): boolean {
    return this.#parked !== undefined;
  }

  stop(stop: StepStop): void {
    this.#send({ type: 'stop', stop });
  }

  pause(): void {
    this.#send({ type: 'pause' });
  }

  /** A model call went out: the step is parked if it lasts. */
  modelCallStarted(): void {
    this.#joinCrowd();
    this.#parkIfItLasts();
  }

  /** The model call ended (its reply, or its failure): a parked step wakes to take it. */
  modelCallEnded(): void {
    this.#leaveCrowd();
    this.#step.deps.clock.clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#parked) this.#wake(false);
  }

  /** The host stopped its actors while the step was parked: it ends as its actor would have, its model call aborted. */
  hostStopped(): void {
    this.#wake();
  }

  /**
   * Arms the one timer that parks the step while its model call waits: after `parkAfterMs`, or, on a host and when
   * that is longer than {@link CROWD_MIN_WAIT_MS}, a look at the crowd then, which parks the step if the crowd is over
   * {@link CROWD} and else waits out the rest of `parkAfterMs`.
   */
  #parkIfItLasts(): void {
    const { actors, clock, parkAfterMs = 0 } = this.#step.deps;
    clock.clearTimeout(this.#timer);
    if (!actors || parkAfterMs <= CROWD_MIN_WAIT_MS) {
      this.#timer = clock.setTimeout(() => this.#park(), parkAfterMs);
      return;
    }
    this.#timer = clock.setTimeout(() => {
      if (actors.waitingOnModel > CROWD) this.#park();
      else this.#timer = clock.setTimeout(() => this.#park(), parkAfterMs - CROWD_MIN_WAIT_MS);
    }, CROWD_MIN_WAIT_MS);
  }

  #joinCrowd(): void {
    if (this.#inCrowd) return;
    this.#inCrowd = true;
    this.#step.deps.actors?.modelWaitStarted();
  }

  #leaveCrowd(): void {
    if (!this.#inCrowd) return;
    this.#inCrowd = false;
    this.#step.deps.actors?.modelWaitEnded();
  }

  /** Spawns an actor for the step (its host's child, or a root of its own), listened to before it starts. */
  #start(input: AgentActorInput): void {
    const { deps, request } = this.#step;
    let actor: AgentActorRef;
    let output: Promise<AgentOutput | undefined>;
    // Listened to before it starts, so its first events (the first `llm.request`) are published too.
    const listen = (spawned: AgentActorRef) => this.#listen(spawned);
    if (deps.actors) ({ agent: actor, output } = deps.actors.spawn(request.stepId, input, listen));
    else {
      actor = createActor(agentMachine, { clock: deps.clock, input });
      listen(actor);
      output = toPromise(actor);
      actor.start();
    }
    this.#actor = actor;
    // An actor in error (an action that threw) rejects: that step's failure, never its host's or its neighbours'.
    output.then(
      (ended) => this.#ended(actor, ended),
      (error: unknown) => {
        if (this.#actor !== actor) return;
        this.#leaveCrowd();
        this.#settle(crashedReply(request, error));
      },
    );
  }

  /** Publishes what the actor emits as the step's events. */
  #listen(actor: AgentActorRef): void {
    const { deps, request } = this.#step;
    actor.on('*', (emitted) => {
      // An event that cannot be made or sent must not take the process down (xstate rethrows listener errors).
      try {
        deps.publish(toWireEvent(emitted, this.#step));
      } catch (error) {
        deps.logger?.error(
          { err: error, stepId: request.stepId },
          `cannot publish ${emitted.type}; the step goes on`,
        );
      }
    });
  }

  /** An actor's end: the step's, unless it was the actor of a step since parked. */
  #ended(actor: AgentActorRef, ended: AgentOutput | undefined): void {
    if (this.#actor !== actor) return;
    const { deps, request } = this.#step;
    this.#leaveCrowd();
    deps.clock.clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#settle(
      // No output: stopped before its end with the host actor (a group's child ends with its parent), which only a
      // host stopping does; the workflow sends the step elsewhere, as it does a step the host stopped.
      ended === undefined
        ? this.#stoppedWithHost()
        : offloadReply(this.#step, toReply(request.stepId, ended, this.#step.told.readIds)),
    );
  }

  #stoppedWithHost(): AgentStepReply {
    const { stepId } = this.#step.request;
    return failedReply(stepId, 'worker_stopped', `the agent host stopped before step ${stepId} ended`);
  }

  /** The model call has lasted: a step still waiting on it lets its actor go, keeping its context. */
  #park(): void {
    this.#timer = undefined;
    const actor = this.#actor;
    const snapshot = actor?.getSnapshot();
    if (!actor || snapshot?.status !== 'active') return;
    if (!snapshot.matches({ working: 'thinking' }) && !snapshot.matches({ working: 'woken' })) return;
    const { deps, request } = this.#step;
    const context = snapshot.context;
    this.#services.detachModelCall();
    this.#leaveCrowd();
    this.#actor = undefined;
    this.#parked = context;
    if (deps.actors) deps.actors.park(request.stepId, this);
    else actor.stop();
    // Its time limit, which the actor kept, is kept here while it sleeps (a paused step's no longer counts).
    const limit = timeLimit(context);
    if (limit === undefined || context.paused) return;
    const left = Math.max(0, limit.ms - (deps.clock.now() - this.#startedAt));
    this.#timer = deps.clock.setTimeout(() => this.#timeUp(), left);
  }

  /** A parked step's time limit ran out: woken, it is stopped as its actor's own limit would have. */
  #timeUp(): void {
    const limit = this.#parked && timeLimit(this.#parked);
    if (limit) this.stop(limit.stop);
  }

  /**
   * A new actor takes up the parked step from its context, in the model call, which it adopts; woken while the call
   * still waits (`callWaiting`: by a pause, say), it is parked again if the call lasts. A step that cannot be woken
   * replies `agent_crashed`, or `worker_stopped` when its host stopped its actors.
   */
  #wake(callWaiting = true): void {
    const context = this.#parked;
    if (!context) return;
    const { actors, clock } = this.#step.deps;
    this.#parked = undefined;
    actors?.woken(this);
    clock.clearTimeout(this.#timer);
    this.#timer = undefined;
    try {
      this.#start({ woken: { context, ranMs: clock.now() - this.#startedAt } });
      if (!callWaiting) return;
      this.#joinCrowd();
      this.#parkIfItLasts();
    } catch (error) {
      // No actor will hold the call: it is aborted, as a stopped actor's is.
      this.#services.abortModelCall(error);
      // A parked step's host stopped its actors without stopping the step first: it ends as its actor would have.
      this.#settle(actors?.stopped ? this.#stoppedWithHost() : crashedReply(this.#step.request, error));
    }
  }

  /**
   * An event for the step's actor. A parked step is woken for it on a microtask, never at once: a stop or pause may
   * come from inside its step group's own transition (an event of another step of the group, heard at once), where
   * no actor can be spawned.
   */
  #send(event: AgentEvent): void {
    if (this.#parked) queueMicrotask(() => this.#wakeFor(event));
    else this.#actor?.send(event);
  }

  /** Wakes the step, if it is still parked, and sends its actor `event`. */
  #wakeFor(event: AgentEvent): void {
    this.#wake();
    this.#actor?.send(event);
  }
}
