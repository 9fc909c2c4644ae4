import {
  AckPolicy,
  type Consumer,
  type ConsumerMessages,
  DeliverPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  type JsMsg,
  RetentionPolicy,
  StorageType,
} from '@nats-io/jetstream';
import type { JetStreamBus } from '../transport/bus.ts';
import { jetstreamManagerOf, jetstreamOf } from '../transport/jetstreamSetup.ts';

/**
 * A queue of work items shared by several processes: a JetStream work-queue stream and one durable pull consumer
 * they all take from, so each item is worked on by one taker at a time. An item stays until its taker says it is
 * done; a taker that hands it back lets another take it at once, and one that dies has it taken over when its ack
 * wait runs out. Uses only what nats-server 2.9 has.
 */
export interface WorkQueueSpec {
  stream: string;
  /** The subjects items are added on (a wildcard): an item's subject says what it is. */
  subjects: string;
  /** The durable consumer every taker pulls from. */
  consumer: string;
  /** How long a taker may hold an item without a sign of life ({@link WorkItem.working}) before another takes it. */
  ackWaitMs: number;
  /** How long an item added twice with the same message id counts as one (2 minutes). */
  duplicateWindowMs?: number;
  /** The most items held by takers at once, across every taker (10,000). */
  maxHeld?: number;
}

/** One item taken from a {@link WorkQueue}: settle it once, with `done`, `handBack` or `drop`. */
export interface WorkItem {
  readonly subject: string;
  /** Tells the server its taker is still on it, so its ack wait starts again. */
  working(): void;
  /** Finished: it leaves the queue. */
  done(): void;
  /** Given back for any taker to take (after `delayMs` when given). */
  handBack(delayMs?: number): void;
  /** Never to be worked on: it leaves the queue (a subject that names no work). */
  drop(): void;
}

/**
 * Makes the queue's stream and consumer, or brings the consumer's ack wait to `spec.ackWaitMs` when `setAckWait`.
 * Safe on every start and from several processes at once.
 */
export async function ensureWorkQueue(
  bus: JetStreamBus,
  spec: WorkQueueSpec,
  setAckWait = false,
): Promise<void> {
  const jsm = await jetstreamManagerOf(bus);
  try {
    await jsm.streams.info(spec.stream);
  } catch (error) {
    if (!isNotFound(error, JetStreamApiCodes.StreamNotFound)) throw error;
    await jsm.streams
      .add({
        name: spec.stream,
        subjects: [spec.subjects],
        // A message is gone once acked: the queue holds only the work still to do.
        retention: RetentionPolicy.Workqueue,
        storage: StorageType.File,
        max_age: 0,
        duplicate_window: nanos(spec.duplicateWindowMs ?? 2 * 60_000),
      })
      .catch((raced) => {
        // Another process made it between our look and our write.
        if (!(raced instanceof JetStreamApiError)) throw raced;
      });
  }
  const wanted = {
    durable_name: spec.consumer,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: nanos(spec.ackWaitMs),
    // Work whose target is down for a while is retried by its taker, not by redelivery: no cap here.
    max_deliver: -1,
    max_ack_pending: spec.maxHeld ?? 10_000,
  };
  try {
    const info = await jsm.consumers.info(spec.stream, spec.consumer);
    if (setAckWait && info.config.ack_wait !== wanted.ack_wait) {
      await jsm.consumers.update(spec.stream, spec.consumer, wanted);
    }
  } catch (error) {
    if (!isNotFound(error, JetStreamApiCodes.ConsumerNotFound)) throw error;
    await jsm.consumers.add(spec.stream, wanted).catch(async (raced) => {
      if (!(raced instanceof JetStreamApiError)) throw raced;
      await jsm.consumers.info(spec.stream, spec.consumer);
    });
  }
}

/** Adds an item (no message id: an item added again after it was dropped is a new one). */
export async function addWork(bus: JetStreamBus, subject: string): Promise<void> {
  await jetstreamOf(bus).publish(subject, new Uint8Array());
}

/** A taker's end of a {@link WorkQueueSpec}'s queue, once its consumer exists. */
export class WorkQueue {
  readonly #consumer: Consumer;
  /** The pull under way, which {@link stop} ends. */
  #fetching: ConsumerMessages | undefined;

  private constructor(consumer: Consumer) {
    this.#consumer = consumer;
  }

  /** Opens the queue's consumer: fails when it is not there (see {@link ensureWorkQueue}) or NATS cannot be reached. */
  static async open(bus: JetStreamBus, spec: Pick<WorkQueueSpec, 'stream' | 'consumer'>): Promise<WorkQueue> {
    return new WorkQueue(await jetstreamOf(bus).consumers.get(spec.stream, spec.consumer));
  }

  /** The next item, or undefined when none came within `expiresMs` or the pull was stopped. */
  async take(expiresMs: number): Promise<WorkItem | undefined> {
    // A fetch of one, not `next()`: a stop ends it at once instead of after its expiry.
    const batch = await this.#consumer.fetch({ max_messages: 1, expires: expiresMs });
    this.#fetching = batch;
    try {
      for await (const msg of batch) return itemOf(msg);
      return undefined;
    } finally {
      this.#fetching = undefined;
    }
  }

  /** Ends the pull under way, if any: its {@link take} answers undefined. */
  stop(): void {
    this.#fetching?.stop();
  }
}

/** Settling never throws: with the connection gone, the server hands the item on when its ack wait runs out. */
function itemOf(msg: JsMsg): WorkItem {
  const quietly = (settle: () => void) => {
    try {
      settle();
    } catch {
      // See above.
    }
  };
  return {
    subject: msg.subject,
    working: () => quietly(() => msg.working()),
    done: () => quietly(() => msg.ack()),
    handBack: (delayMs) => quietly(() => msg.nak(delayMs)),
    drop: () => quietly(() => msg.term()),
  };
}

/** JetStream's durations are in nanoseconds. */
const nanos = (ms: number): number => ms * 1_000_000;

function isNotFound(error: unknown, code: number): boolean {
  return error instanceof JetStreamApiError && error.code === code;
}
