import { AgentStepReply, type AgentStepRequest, isRetryable, StepHeartbeat } from '@troupe/protocol';
import {
  failedReply,
  type HeartbeatRequest,
  type HeartbeatRequestListener,
  type MessageLogLevel,
  requestLocally,
  startHeartbeatRequest,
  TransportError,
} from '@troupe/runtime';
import { type CallbackActorLogic, type CallbackSnapshot, fromCallback } from 'xstate';
import { checkpointOf, runFactsOf, steeringOf, type TaskCheckpoint } from '../task/runContext.ts';
import type { HoldWatcher, TaskSteering } from '../task/taskSteering.ts';
import type { SendInFlight } from './sendsInFlight.ts';
import type { StepCallEvent, StepCallServices } from './stepCall.ts';
import { heldDeadline, watchHeldDeadline } from './stepCallDeadline.ts';
import { type HearsReconnects, StepCallReconnects } from './stepCallReconnects.ts';
import { heldSoFar, timeLeft } from './stepCallRules.ts';

/** How long past a step's timeout the workflow waits for the agent's own account of it before giving up. */
export const REPLY_GRACE_MS = 2_000;
/** Heartbeats in a row a step may miss before it goes to another worker. */
export const MISSED_HEARTBEATS = 3;

/** What one send of the step is given: plain data, so a restored send goes out again the same way. */
export interface RequestInput {
  request: AgentStepRequest;
  subject: string;
  started: number;
  timeoutMs: number;
  /** The task's held time counts against its deadline (`budget.pausedTimeCounts`): the deadline is sent as it is. */
  pausedTimeCounts: boolean;
  /** No run of the step can have started before this send (see `fresh`): the first send of a first delivery. */
  fresh: boolean;
  /** No worker served the agent at the last send: this one is logged at debug (one line said so already). */
  quiet: boolean;
  /** The call's `heldBase` as it was sent: the task's held time past it is not the step's (see `stepCall.ts`). */
  heldBase?: number | undefined;
  /** Sent again over NATS after a reconnect, to join the run of the step there (see `StepCallContext.overNats`). */
  overNats?: boolean;
}

/**
 * One send of the step, the step call's `request` child: its heartbeats, reply or failure, and the connection's
 * reconnects (after one, the reply may have been lost), come back as events; stopping it cancels it. The reconnects
 * are heard here, not by an actor of their own beside it: only a send in flight has a reply to lose, and each actor a
 * parked task keeps costs it about 2 KB of heap. Restored from a checkpoint it is never `fresh`: it goes out again
 * after a run of the step may have started (its host must look in the journal), whatever the send it repeats said.
 *
 * The task held while the send waits (its host finishes a call, or waits on a person, before it replies `paused`): the
 * request's timeout is held with it (the task's steering is its hold), and the call hears `heldAtWork`, then
 * `unheldAtWork` on the resume, so the step's own time stops too. Heartbeats are still awaited meanwhile. When the
 * pipeline counts held time against the task's deadline, the deadline passing while held says `pastDeadline`.
 */
export function stepSendLogic(services: StepCallServices) {
  const { bus, clock } = services;
  const reconnects = new StepCallReconnects(bus);
  return restoredUnfresh(
    fromCallback<StepCallEvent, RequestInput>(({ input, sendBack, system }) => {
      const { sends } = services;
      const { taskId, stepId } = input.request;
      // Restored from its passivated task's snapshot: the send under way is this call's, and is not sent again.
      const adopted = sends?.adopt(taskId, stepId);
      if (sends && adopted) {
        adopted.heardBy(sendBack);
        return () => adopted.stopped();
      }
      // The one gate on sends: a held task (`troupe pause`) sends no step, a first one or a resend, a restored one too.
      const steering = steeringOf(system);
      if (steering?.held) {
        sendBack({ type: 'held' });
        return;
      }
      // Held since the call last counted it, unheard (a send restored after the task was paused and resumed, a pause
      // that began and ended in a wait to send again): not the step's time, and the call counts it now.
      const held =
        steering && input.heldBase !== undefined
          ? Math.max(0, heldSoFar(steering, clock.now()) - input.heldBase)
          : 0;
      if (held > 0) sendBack({ type: 'unheldAtWork' });
      const left = timeLeft(clock, { ...input, started: input.started + held });
      // A restored call may find its time spent while it was down: that is the step's timeout, not a send.
      if (left <= 0) {
        sendBack({ type: 'failed', error: new TransportError('timeout', 'the step ran out of time') });
        return;
      }
      const send = new StepSend(services, reconnects, input, steering, sendBack);
      const facts = runFactsOf(system);
      const request: AgentStepRequest = {
        ...input.request,
        ...(steering ? steered(input.request, steering, input.pausedTimeCounts) : {}),
        ...(facts
          ? {
              traceparent: facts.traceparent,
              ...(facts.version === undefined ? {} : { version: facts.version }),
            }
          : {}),
        timeoutMs: left,
        // Steering a host heard after this, before the step reached it, is applied as the step starts.
        sentAt: clock.now(),
        heartbeatMs: services.heartbeatMs,
        ...(input.fresh ? { fresh: true as const } : {}),
      };
      const meta = {
        taskId: input.request.taskId,
        from: input.request.from ?? 'workflow',
        to: input.request.agent,
        kind: 'agent.step',
      };
      // While no worker serves the agent the step is sent again every 2 s: one line says so, not each send.
      const logLevel: MessageLogLevel | undefined = input.quiet ? 'debug' : undefined;
      // The agent stops itself at `left` and says why (what it waited on); its reply gets a moment to come.
      const timeoutMs = left + REPLY_GRACE_MS;
      // A host of this process takes the step if it can: no NATS hop, no heartbeats, and no reply a reconnect can lose.
      // Its lines are those of a step over NATS, marked `local`.
      // Its journal waits for the task's checkpoints, which record its final model reply with its output.
      const checkpoint = checkpointOf(system);
      if (!input.overNats && services.local) {
        const abort = new AbortController();
        const local = requestLocally(services.local, request, {
          timeoutMs,
          signal: abort.signal,
          ...(steering ? { hold: steering } : {}),
          clock,
          onHeartbeat: (heartbeat) => send.heartbeat(heartbeat),
          log: { logger: bus.logger, level: logLevel ?? bus.messageLogLevel, subject: input.subject, meta },
          ...(checkpoint ? { checkpoint } : {}),
        });
        if (local) return send.takenLocally(local, abort, checkpoint);
      }
      // A worker elsewhere journals at once: an output owed to the task's record by a step here is stored first.
      return send.overNats(checkpoint?.owes ? checkpoint.stored() : undefined, (listener) =>
        startHeartbeatRequest(
          bus,
          input.subject,
          request,
          AgentStepReply,
          StepHeartbeat,
          {
            timeoutMs,
            idleMs: services.heartbeatMs * MISSED_HEARTBEATS,
            held: steering?.held,
            clock,
            meta,
            ...(logLevel ? { logLevel } : {}),
          },
          listener,
        ),
      );
    }),
  );
}

/**
 * What one send keeps while its request waits, in one object (a parked task keeps it for as long as its model call
 * lasts): where its events go, the task's steering it holds the request by, its watch on the task's deadline while
 * held, and how to stop the request.
 */
class StepSend implements HeartbeatRequestListener<AgentStepReply>, HearsReconnects, HoldWatcher {
  readonly #services: StepCallServices;
  readonly #reconnects: StepCallReconnects;
  readonly #stepId: string;
  /** The task's deadline while it is held, when held time counts (see `heldDeadline`). */
  readonly #deadline: number | undefined;
  readonly #steering: TaskSteering | undefined;
  /** The call, until the runner keeps the send (`#kept`): its events then go through it. */
  #call: ((event: StepCallEvent) => void) | undefined;
  /** Kept by the runner while under way, its events through it: a passivated task's send goes on (`sendsInFlight.ts`). */
  #kept: SendInFlight | undefined;
  #request: HeartbeatRequest | undefined;
  #abort: AbortController | undefined;
  /** The request has settled, or the send was stopped: nothing more is told. */
  #settled = false;
  #unwatch: (() => void) | undefined;
  /** The step is at work while this send lasts (see `TaskSteering.beginWork`), until `end`. */
  #atWork = false;

  constructor(
    services: StepCallServices,
    reconnects: StepCallReconnects,
    input: RequestInput,
    steering: TaskSteering | undefined,
    call: (event: StepCallEvent) => void,
  ) {
    const { taskId, stepId } = input.request;
    this.#services = services;
    this.#reconnects = reconnects;
    this.#stepId = stepId;
    this.#deadline = heldDeadline(input);
    this.#steering = steering;
    // At work while this send lasts: a message told meanwhile is kept for this step until it reads it.
    steering?.beginWork(stepId);
    this.#atWork = steering !== undefined;
    this.#kept = services.sends?.start(taskId, stepId, () => this.end());
    this.#kept?.heardBy(call);
    this.#call = this.#kept ? undefined : call;
    steering?.listen(this);
  }

  /**
   * The step taken by a host of this process: its reply, and the signal that cancels it. An output it replies with is
   * owed to the task's record (its final model reply may be in no journal, see `StepJournal.forLocalStep`), told
   * right before the workflow hears it: at once, or, for a reply that came while its task slept, once the woken
   * task's call hears it, and never for one its call was stopped before hearing. So each output owed is heard in the
   * same turn, and the snapshot that holds it is the next the writer hears.
   */
  takenLocally(
    reply: Promise<AgentStepReply>,
    abort: AbortController,
    checkpoint: TaskCheckpoint | undefined,
  ): () => void {
    this.#abort = abort;
    reply.then(
      (value) => this.#replied(value, value.ok ? checkpoint : undefined),
      (error: unknown) => this.#failed(error),
    );
    return this.#stopper();
  }

  /**
   * The step sent over NATS, as `start` sends it to this send, once `stored` says the output a step here owed the
   * task's record is stored (when one is owed); its reconnects are heard until it ends. Not stored, it is answered
   * `journal_unavailable`, which sends it again after a pause.
   */
  overNats(
    stored: Promise<boolean> | undefined,
    start: (listener: HeartbeatRequestListener<AgentStepReply>) => HeartbeatRequest,
  ): () => void {
    if (stored === undefined) this.#start(start);
    else
      void stored.then((ok) => {
        if (this.#settled) return;
        if (ok) this.#start(start);
        else this.#replied(notStored(this.#stepId));
      });
    return this.#stopper();
  }

  #start(start: (listener: HeartbeatRequestListener<AgentStepReply>) => HeartbeatRequest): void {
    this.#request = start(this);
    if (!this.#settled) this.#reconnects.add(this);
  }

  heartbeat(heartbeat: unknown): void {
    this.#tell({ type: 'heartbeat', heartbeat: heartbeat as StepHeartbeat });
  }

  // The request's end reaches the call a turn of the microtask queue later, as a promise's did: a signal delivered with
  // the reply (a pause crossing it) is heard first, and holds the step that would follow.
  replied(reply: AgentStepReply): void {
    queueMicrotask(() => this.#replied(reply));
  }

  failed(error: unknown): void {
    queueMicrotask(() => this.#failed(error));
  }

  /** The request's reply, to the call; `owedTo` is told its output is owed right before the call hears it. */
  #replied(reply: AgentStepReply, owedTo?: TaskCheckpoint): void {
    if (!this.#settle()) return;
    // Read messages go to no later step; the reply's checkpoint records that, with the step's end. A failed run's
    // reads do not count: the workflow's retry of the step is a fresh run with a journal of its own (`-r<n>`), which
    // must be given them again. A retryable reply (paused, say) is sent again under the same id, whose journal holds
    // what was read.
    if (reply.toldRead && (reply.ok || isRetryable(reply.error.code)))
      this.#steering?.read(reply.toldRead, this.#stepId);
    this.#tell({ type: 'replied', reply }, owedTo && (() => owedTo.owe()));
  }

  #failed(error: unknown): void {
    if (!this.#settle()) return;
    this.#tell({ type: 'failed', error });
  }

  reconnected(): void {
    if (!this.#settled) this.#tell({ type: 'reconnect' });
  }

  /** Stopped for good: the request is cancelled if it still waits, and what the send listened to is let go. */
  end(): void {
    this.#reconnects.delete(this);
    this.#steering?.unlisten(this);
    this.#unwatch?.();
    if (this.#atWork) this.#steering?.endWork(this.#stepId);
    this.#atWork = false;
    if (this.#settled) return;
    this.#settled = true;
    this.#request?.cancel();
    this.#abort?.abort();
  }

  /** How the call stops it: through the runner when it keeps the send (a passivated task's send goes on). */
  #stopper(): () => void {
    const kept = this.#kept;
    return kept ? () => kept.stopped() : () => this.end();
  }

  /** The request settled: false when it had already, or the send was stopped. */
  #settle(): boolean {
    if (this.#settled) return false;
    this.#settled = true;
    this.#reconnects.delete(this);
    this.#kept?.settled();
    return true;
  }

  /** The task was held or let go (the send hears it from the task's steering while it lasts). */
  holdChanged(held: boolean): void {
    this.#request?.hold(held);
    if (this.#settled) return;
    this.#unwatch?.();
    this.#unwatch = held
      ? watchHeldDeadline(this.#services.clock, this.#deadline, () => this.#tell({ type: 'pastDeadline' }))
      : undefined;
    this.#tell({ type: held ? 'heldAtWork' : 'unheldAtWork' });
  }

  /** An event to the call: `heard` runs right before it hears it (see {@link SendInFlight.tell}). */
  #tell(event: StepCallEvent, heard?: () => void): void {
    if (this.#kept) this.#kept.tell(event, heard);
    else if (this.#call) {
      heard?.();
      this.#call(event);
    }
  }
}

/**
 * What the task's steering adds to a step as it goes out: the told messages no finished step has read, and the
 * task's deadline moved on by the time the task was held (unless the pipeline counts held time against it).
 */
function steered(
  request: AgentStepRequest,
  steering: TaskSteering,
  pausedTimeCounts: boolean,
): Pick<AgentStepRequest, 'told' | 'budget'> {
  const told = steering.toldFor(request.stepId);
  const deadline = request.budget?.deadline;
  return {
    ...(told.length > 0 ? { told: [...told] } : {}),
    ...(request.budget && deadline !== undefined && steering.pausedMs > 0 && !pausedTimeCounts
      ? { budget: { ...request.budget, deadline: deadline + steering.pausedMs } }
      : {}),
  };
}

/** A step not sent because the output it follows could not be stored in the task's record: sent again later. */
function notStored(stepId: string): AgentStepReply {
  return failedReply(
    stepId,
    'journal_unavailable',
    `step ${stepId} was not sent: the task's record of the steps before it could not be stored`,
  );
}

/** The send's logic, restored as never `fresh` (see {@link stepSendLogic}). */
function restoredUnfresh<Logic extends CallbackActorLogic<StepCallEvent, RequestInput>>(logic: Logic): Logic {
  return {
    ...logic,
    restoreSnapshot: (snapshot: CallbackSnapshot<RequestInput>) => ({
      ...snapshot,
      input: { ...snapshot.input, fresh: false },
    }),
  };
}
