import type { AgentStepRequest, TaskEnding, ToldMessage } from '@troupe/protocol';
import type { Delivery } from '../transport/bus.ts';
import type { AgentStep, StepStart } from './agentStep.ts';
import { RecentReplies } from './recentReplies.ts';
import { RecentSteering } from './recentSteering.ts';
import type { HostedAgent } from './remoteAgent.ts';
import type { StepLivenessServices } from './stepLiveness.ts';
import { failedReply } from './stepReply.ts';
import { isLocalDelivery, type LocalDelivery } from './stepRequesters.ts';
import { StepRun, type StepRunServices } from './stepRun.ts';

/** What the steps in flight need from their host. */
export interface StepsInFlightServices extends StepLivenessServices {
  /**
   * Starts a step of `agent`: an agent actor here, or a call to where the agent lives; `paused` when its task was
   * paused while its request was on its way.
   */
  start(agent: HostedAgent, request: AgentStepRequest, options: StepStart): AgentStep;
}

/**
 * The steps running on this host, by step id, and the replies of those that ended lately. A step sent again joins
 * its run or gets its reply rather than running twice; a task's end and the host's stop reach each of its runs; a
 * task's pause and told messages reach its runs, and a run that starts after them (its request was on its way) too.
 */
export class StepsInFlight {
  readonly #runs = new Map<string, StepRun>();
  readonly #services: StepsInFlightServices;
  /** What each run is given: one object for them all, so a run costs little more than its agent step. */
  readonly #runServices: StepRunServices;
  /** The tasks' steering heard lately, for steps whose requests were on their way when it came. */
  readonly #steering: RecentSteering;
  #stopping = false;

  constructor(services: StepsInFlightServices) {
    this.#services = services;
    this.#runServices = { ...services, recent: new RecentReplies(), ended: (run) => this.#ended(run) };
    this.#steering = new RecentSteering(services.clock);
  }

  /** Steps being worked on now. */
  get size(): number {
    return this.#runs.size;
  }

  /** Of them, the steps parked now (their agent actors let go while their model calls wait): counted when asked. */
  get parked(): number {
    let parked = 0;
    for (const run of this.#runs.values()) if (run.parked) parked += 1;
    return parked;
  }

  /** The host is stopping: it takes no more steps. */
  get stopping(): boolean {
    return this.#stopping;
  }

  /** Takes a step delivered for `agent`: starts it, joins it to its run under way, or answers it from its reply. */
  take(delivery: Delivery<AgentStepRequest>, agent: HostedAgent): void {
    const request = delivery.value;
    // Taken in this process after its workflow left it (it waited for an earlier run to unwind): nobody waits.
    if (isLocalDelivery(delivery) && delivery.left) return;
    // A step that waited for an earlier run to unwind may come back after stop(): it goes to another worker.
    if (this.#stopping) {
      delivery.respond(
        failedReply(request.stepId, 'worker_stopped', `the worker serving ${agent.name} is stopping`),
      );
      return;
    }
    // A held task's workflow sends no step: one sent after a pause began shows the task was resumed since, though this
    // host missed the resume (its connection down), so its requests to people held for that pause run out again.
    if (request.sentAt !== undefined) this.#services.human?.sentAfter?.(request.taskId, request.sentAt);
    // The same step sent again (its first reply was lost to a reconnect) joins the run already going here, or
    // gets the reply that run gave, rather than running twice.
    const underway = this.#runs.get(request.stepId);
    if (underway && !underway.orphaned) {
      underway.join(delivery);
      return;
    }
    // A run stopped for want of a requester is unwinding: the new one starts once it is done.
    if (underway) {
      void underway.done.then(() => this.take(delivery, agent));
      return;
    }
    const recent = this.#runServices.recent.of(request.stepId);
    if (recent) {
      void recent.then((reply) => delivery.respond(reply));
      return;
    }
    // A pause or a message that came while the request was on its way (or waited here) is the step's all the same.
    const missed = this.#steering.missedBy(request);
    const given = missed?.told.length
      ? { ...request, told: [...(request.told ?? []), ...missed.told] }
      : request;
    const checkpoint = isLocalDelivery(delivery) ? delivery.checkpoint : undefined;
    const started = this.#services.start(agent, given, {
      ...(missed?.paused ? { paused: true } : {}),
      ...(checkpoint ? { checkpoint } : {}),
    });
    const run = new StepRun(delivery, started, this.#runServices);
    this.#runs.set(request.stepId, run);
  }

  /**
   * A requester in this process left the step (see `LocalSteps`): a run it alone waited for stops, and one it was
   * still to be given to (after an earlier run unwinds) is not started.
   */
  leave(delivery: LocalDelivery): void {
    delivery.left = true;
    this.#runs.get(delivery.value.stepId)?.leave(delivery);
  }

  /** What a heartbeat of a step found: whether the requester at `inbox` still listens. */
  heard(stepId: string, inbox: string, listening: boolean): void {
    this.#runs.get(stepId)?.heard(inbox, listening);
  }

  /** A step started or stopped waiting for a person. */
  waitingChanged(stepId: string): void {
    this.#runs.get(stepId)?.waitingChanged();
  }

  /** A step's model call started (true) or ended (false). */
  modelWait(stepId: string, waiting: boolean): void {
    this.#runs.get(stepId)?.modelWait(waiting);
  }

  /** Stops every step of a task that has ended: nothing it would still do (a tool call, a question) matters. */
  endTask(taskId: string, ending: TaskEnding): void {
    this.#steering.forget(taskId);
    for (const run of this.#runs.values()) {
      if (run.request.taskId !== taskId || run.stopped) continue;
      this.#services.logger.info(
        { taskId, stepId: run.request.stepId },
        `task ${taskId} has ended; stopping its step here`,
      );
      run.stop({ why: 'task_ended', taskId, ending });
    }
  }

  /**
   * A task was paused (the pause began at `since`): each of its steps here stops after its current model or tool
   * call, replying `paused`, and so does one whose request was sent before `since` and arrives later.
   */
  pauseTask(taskId: string, since: number): void {
    this.#steering.paused(taskId, since);
    // What its steps wait on a person for stays answerable and does not run out while the task is paused.
    this.#services.human?.hold?.(taskId, since);
    for (const run of this.#runs.values()) if (run.request.taskId === taskId) run.pause();
  }

  /** A task was resumed after the pause that began at `since`: a step sent before it no longer stops for it. */
  resumeTask(taskId: string, since: number | undefined): void {
    this.#steering.resumed(taskId, since);
    this.#services.human?.letGo?.(taskId, since);
  }

  /**
   * A person told a task something: each of its steps here reads it before its next model call, and so does one whose
   * request was sent before it and arrives later.
   */
  tellTask(taskId: string, message: ToldMessage): void {
    this.#steering.told(taskId, message);
    for (const run of this.#runs.values()) if (run.request.taskId === taskId) run.tell(message);
  }

  /** Takes no more steps, stops the ones in flight and waits for their replies to go out. */
  async stop(): Promise<void> {
    this.#stopping = true;
    const runs = [...this.#runs.values()];
    for (const run of runs) run.stop({ why: 'worker_stopping' });
    await Promise.allSettled(runs.map((run) => run.done));
  }

  #ended(run: StepRun): void {
    const { stepId } = run.request;
    if (this.#runs.get(stepId) !== run) return;
    this.#runs.delete(stepId);
    if (run.beatsOverNats) this.#services.heartbeats.stop(stepId);
  }
}
