import { readTaskEvents } from '@troupe/client';
import { STREAMS, subjects, type TroupeEvent } from '@troupe/protocol';
import {
  type JetStreamBus,
  openDurableConsumer,
  type StoredMessage,
  type UntilReachableOptions,
} from '@troupe/runtime';
import { deadLetter, type ExhaustedTask } from './deadLetters.ts';

/** One stored task message of the `TASKS` stream, handed to the runner with the means to settle or park it. */
export interface TaskDelivery extends StoredMessage {
  /**
   * The task waits (on a person, or a slow model) and does no work meanwhile: it stops counting against the
   * queue's `concurrency` (it still counts against `maxInFlight`), so more tasks may start. `false` when it works
   * again.
   */
  park(parked: boolean): void;
}

export interface TaskQueueOptions {
  pipeline: string;
  /** The most tasks this process works on at once; parked tasks (see {@link TaskDelivery.park}) do not count. */
  concurrency: number;
  /** The most tasks this process holds at once, parked or working (default {@link DEFAULT_MAX_IN_FLIGHT}). */
  maxInFlight?: number;
  /** How long a delivery may go without `working()` before it is redelivered. */
  ackWaitMs?: number;
  /** How long setting up the consumer waits for NATS and JetStream through an outage before it gives up. */
  wait?: UntilReachableOptions;
  /**
   * While true, no new task is pulled (those held go on): backpressure from what the tasks in flight produce
   * faster than it can go out, such as events waiting for the `EVENTS` stream. Checked before each pull and every
   * {@link HOLD_RECHECK_MS} while held.
   */
  holdIntake?: () => boolean;
  handle(delivery: TaskDelivery): Promise<void>;
}

export interface TaskQueue {
  readonly consumer: string;
  /** Tasks being handled now, parked or not. */
  readonly active: number;
  /** Of those, the tasks parked now. */
  readonly parked: number;
  /** Stops fetching; waits for the tasks being handled to finish. */
  stop(): Promise<void>;
}

/**
 * Where a pipeline's tasks come from and where those given up on go: the `TASKS` stream and the dead-letter subject
 * over NATS ({@link natsTaskIntake}), or an in-memory stand-in in unit tests.
 */
export interface TaskIntake {
  /** Starts handing the pipeline's tasks to `options.handle`. */
  start(options: TaskQueueOptions): Promise<TaskQueue>;
  /** Stores a task given up on, with why, on `troupe.deadletter.<pipeline>`. */
  deadLetter(
    pipeline: string,
    task: ExhaustedTask,
    reason: { taskId: string; message: string },
  ): Promise<void>;
  /** An ended task's events, as the `EVENTS` stream keeps them: what a restart or fork of it reuses. */
  taskEvents(taskId: string, pipeline: string): Promise<TroupeEvent[]>;
}

/** Task intake over NATS JetStream: {@link startTaskQueue} and {@link deadLetter}. */
export function natsTaskIntake(bus: JetStreamBus): TaskIntake {
  return {
    start: (options) => startTaskQueue(bus, options),
    deadLetter: (pipeline, task, reason) => deadLetter(bus, pipeline, task, reason),
    taskEvents: (taskId, pipeline) => readTaskEvents(bus, taskId, pipeline),
  };
}

/** The durable consumer name shared by every coordinator serving a pipeline. */
export const taskConsumerName = (pipeline: string): string => `troupe-tasks-${pipeline}`;

const FETCH_EXPIRES_MS = 2_000;

/** While intake is held, how often the hold is checked again. */
const HOLD_RECHECK_MS = 50;

/** How many tasks of a pipeline one process holds at once by default, parked or working. */
export const DEFAULT_MAX_IN_FLIGHT = 1_000;

/**
 * How long a task handed back at shutdown waits before redelivery: longer than this process's last pull may
 * run, so the task goes to the next coordinator instead of back to this one (which would count a delivery).
 */
export const HAND_BACK_DELAY_MS = FETCH_EXPIRES_MS + 500;

/**
 * Pulls a pipeline's tasks from the `TASKS` stream through a durable consumer shared by every coordinator that
 * serves the pipeline, never working on more than `concurrency` at once nor holding more than `maxInFlight`. A task
 * that waits on a person or a slow model parks (see {@link TaskDelivery.park}) and frees its working slot. The
 * handler settles each delivery.
 */
export async function startTaskQueue(bus: JetStreamBus, options: TaskQueueOptions): Promise<TaskQueue> {
  const name = taskConsumerName(options.pipeline);
  // Every task stored for the pipeline runs, those stored before any coordinator served it included: a task the
  // stream acknowledged is never dropped for having come early (as it would be while `troupe up` starts). No cap
  // across coordinators on tasks unacknowledged (a task stays so while it runs, parked or not): each coordinator
  // holds at most its own maxInFlight.
  const consumer = await openDurableConsumer(bus, {
    stream: STREAMS.tasks,
    name,
    filterSubject: subjects.task(options.pipeline),
    ackWaitMs: options.ackWaitMs ?? 30_000,
    // The server never gives up on a task: its runner does, counting deliveries without progress (`maxDeliver`).
    maxDeliver: -1,
    ...(options.wait === undefined ? {} : { wait: options.wait }),
  });

  const maxInFlight = options.maxInFlight ?? DEFAULT_MAX_IN_FLIGHT;
  /** Every task in hand, by its handling; the parked ones also in `parked`. */
  const inHand = new Set<Promise<void>>();
  const parked = new Set<object>();
  let stopped = false;
  let wake: (() => void) | undefined;
  // The pull in progress: ended at stop(), as nats.js waits out a lost connection inside it until NATS is back.
  let batch: { close(): Promise<unknown> } | undefined;
  const settled = () => new Promise<void>((resolve) => (wake = resolve));
  const room = () => Math.min(options.concurrency - (inHand.size - parked.size), maxInFlight - inHand.size);

  const loop = (async () => {
    while (!stopped) {
      const free = room();
      if (free <= 0) {
        await settled();
        continue;
      }
      if (options.holdIntake?.()) {
        await new Promise((resolve) => setTimeout(resolve, HOLD_RECHECK_MS).unref());
        continue;
      }
      try {
        const pulled = await consumer.fetch(free, FETCH_EXPIRES_MS);
        batch = pulled;
        if (stopped) void pulled.close();
        for await (const msg of pulled) {
          const slot = {};
          let ended = false;
          const park = (park: boolean) => {
            if (ended || park === parked.has(slot)) return;
            if (park) parked.add(slot);
            else parked.delete(slot);
            // A task parking frees a working slot: fetch more now, not when a task ends.
            if (park) wake?.();
          };
          const work = options
            .handle(toDelivery(msg, park))
            .catch((error: unknown) =>
              bus.logger.error({ err: error, subject: msg.subject }, 'task handler failed'),
            )
            .finally(() => {
              ended = true;
              parked.delete(slot);
              inHand.delete(work);
              wake?.();
            });
          inHand.add(work);
        }
      } catch (error) {
        if (stopped) break;
        bus.logger.warn({ err: error, consumer: name }, 'fetching tasks failed; retrying');
        await new Promise((resolve) => setTimeout(resolve, 1_000));
      }
    }
  })();

  return {
    consumer: name,
    get active() {
      return inHand.size;
    },
    get parked() {
      return parked.size;
    },
    async stop() {
      stopped = true;
      wake?.();
      void batch?.close();
      await loop;
      await Promise.allSettled([...inHand]);
    },
  };
}

function toDelivery(msg: StoredMessage, park: (parked: boolean) => void): TaskDelivery {
  return { ...msg, park };
}
