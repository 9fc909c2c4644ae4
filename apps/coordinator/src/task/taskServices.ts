import type { QueuedStore } from '@troupe/client';
import type { TaskEnding, TroupeEvent, WorkflowRecord } from '@troupe/protocol';
import type { Bus, Clock, EventFactory, KvStore, Logger, RequestsHold, ValueStore } from '@troupe/runtime';
import type { AnyActorRef } from 'xstate';
import type { IntakeLimits } from '../intake/intakeLimits.ts';
import type { TaskIntake } from '../intake/taskQueue.ts';
import type { FlowVersions } from '../workflow/flowVersions.ts';
import type { CheckpointWriter } from './checkpointWriter.ts';
import type { FinalEvents } from './finalEvents.ts';
import type { TaskSignals } from './taskSignals.ts';

/** Where task records live: the KV bucket `workflows`, as far as a task uses it. */
export type WorkflowStore = Pick<KvStore<typeof WorkflowRecord>, 'get' | 'create' | 'update'>;

/**
 * What every task of one pipeline runner shares, built once by the runner: intake's stages and the task actor take
 * what they need of it (`Pick<TaskServices, …>`), so a unit test builds only that.
 */
export interface TaskServices {
  pipeline: string;
  bus: Bus;
  store: WorkflowStore;
  clock: Clock;
  logger: Logger;
  events: EventFactory;
  finalEvents: FinalEvents;
  /** The pipeline's versions, compiled with the runner's steps. */
  versions: FlowVersions;
  /** Where given-up tasks are dead-lettered. */
  deadLetter: TaskIntake['deadLetter'];
  /** An ended task's events, for a restart or fork of it (originClaim.ts). */
  taskEvents: TaskIntake['taskEvents'];
  /** How large and deep a task payload may be. */
  limits: IntakeLimits;
  /** Where inputs too large for a task message are read from; without it, a task with one is refused. */
  values?: Pick<ValueStore, 'read'>;
  /** Marks of tasks queued through the gateway (KV `queued`): a claim takes its task's, and honours its cancel. */
  queued?: QueuedStore;
  /** Deliveries in a row without progress before a task is given up on. */
  maxDeliver: number;
  /** How often a task being handled tells the server it is still working on it. */
  keepAliveMs: number;
  /**
   * How long the checkpoint that records a local step's output may wait for the next write while only steps of this
   * process follow (see `CheckpointWriter`): default 20 ms; 0 writes every checkpoint, each at once.
   */
  checkpointLingerMs?: number;
  /** How long a task's end waits for its final event before it says so, and a stop before it leaves it (default 10 s). */
  finalEventWaitMs?: number;
  /** Cancels, migrations, parents' endings and the stop, for each task actor here. */
  signals: TaskSignals;
  /**
   * The runner's passivation, when it passivates (`passivation.ts`): told which task actor holds a writer, and when a
   * task's steps begin to only wait.
   */
  passivation?: {
    ownedBy(writer: CheckpointWriter, task: AnyActorRef): void;
    waiting(writer: CheckpointWriter): void;
  };
  /** Closes a task's pending approvals and questions once it has ended; returns how many it closed. */
  closeRequests?: (taskId: string, ending: TaskEnding) => Promise<number>;
  /** Holds a task's pending approvals and questions as its pause is recorded, and lets them go at its resume. */
  holdRequests?: (taskId: string, change: RequestsHold) => Promise<number>;
  /** Whether the runner is stopping: a delivery that begins then is handed back. */
  stopping(): boolean;
  /**
   * Aborts `finalEventWaitMs` (10 s) after the runner's stop began: a task's end still waiting for its final event
   * then leaves the message to a redelivery, so a stop with NATS out of reach does not wait for it forever. A signal,
   * not a promise, so that each task's wait can take its listener off again (a race with a promise that settles only
   * at the stop would keep one reaction on it per task, for the runner's life).
   */
  stopped: AbortSignal;
}

/** An event that cannot be made or sent is logged, never thrown: it must not take the process down. */
export function publishSafely(
  { bus, logger }: Pick<TaskServices, 'bus' | 'logger'>,
  taskId: string,
  make: () => TroupeEvent,
): Promise<boolean> {
  try {
    return bus.publishEvent(make());
  } catch (error) {
    logger.error({ err: error, taskId }, 'cannot publish an event; the task goes on');
    return Promise.resolve(false);
  }
}

/** The clock's time as a record stores it. */
export function isoNow(clock: Clock): string {
  return new Date(clock.now()).toISOString();
}
