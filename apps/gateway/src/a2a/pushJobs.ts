import {
  AckPolicy,
  DeliverPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  RetentionPolicy,
  StorageType,
} from '@nats-io/jetstream';
import { A2A_PUSH_QUEUE, ROOT, subjects } from '@troupe/protocol';
import { jetstreamManagerOf, jetstreamOf, type NatsBus } from '@troupe/runtime';
import { PushError } from './pushError.ts';

/**
 * The queue of webhook deliveries: one message per push config, kept until that config's deliveries are over (the
 * task ended and its last state was delivered, the config was deleted, or its receiver was given up on). All gateways
 * take from one durable consumer, so each config is worked on by one gateway at a time, in order; a gateway that
 * stops hands its configs back at once, one that dies has them taken over when their ack wait runs out.
 */
export const PUSH_STREAM = A2A_PUSH_QUEUE.stream;
/** The durable consumer every gateway pulls from. */
export const PUSH_CONSUMER = A2A_PUSH_QUEUE.consumer;
/** The subjects of the queue: `troupe.a2a.push.<taskId>.<configId>`. */
export const PUSH_SUBJECTS = subjects.allA2aPushJobs;

/** How long a gateway may hold a config without a sign of life before another takes it over (it signals every third). */
export const DEFAULT_PUSH_ACK_WAIT_MS = 30_000;

export const pushJobSubject = subjects.a2aPushJob;

/** The task and config a queue message is for, from its subject; undefined for a subject that is not one. */
export function pushJobOf(subject: string): { taskId: string; configId: string } | undefined {
  const [root, area, kind, taskId, configId, ...more] = subject.split('.');
  if (root !== ROOT || area !== 'a2a' || kind !== 'push' || !taskId || !configId || more.length > 0)
    return undefined;
  return { taskId, configId };
}

/**
 * Makes the queue's stream and consumer, or brings the consumer's ack wait to `ackWaitMs` when one is given. Safe on
 * every start and from several gateways at once. Uses only what nats-server 2.9 has (a work-queue stream, a durable
 * pull consumer).
 */
export async function ensurePushQueue(bus: NatsBus, ackWaitMs?: number): Promise<void> {
  const jsm = await jetstreamManagerOf(bus);
  try {
    await jsm.streams.info(PUSH_STREAM);
  } catch (error) {
    if (!isNotFound(error, JetStreamApiCodes.StreamNotFound)) throw error;
    await jsm.streams
      .add({
        name: PUSH_STREAM,
        subjects: [PUSH_SUBJECTS],
        // A message is gone once acked: the queue holds only the configs still being delivered.
        retention: RetentionPolicy.Workqueue,
        storage: StorageType.File,
        max_age: 0,
        duplicate_window: nanos(2 * 60_000),
      })
      .catch((raced) => {
        // Another gateway made it between our look and our write.
        if (!(raced instanceof JetStreamApiError)) throw raced;
      });
  }
  const wanted = {
    durable_name: PUSH_CONSUMER,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: nanos(ackWaitMs ?? DEFAULT_PUSH_ACK_WAIT_MS),
    // A receiver down for a while is retried by the gateway holding its config, not by redelivery: no cap here.
    max_deliver: -1,
    max_ack_pending: 10_000,
  };
  try {
    const info = await jsm.consumers.info(PUSH_STREAM, PUSH_CONSUMER);
    if (ackWaitMs !== undefined && info.config.ack_wait !== wanted.ack_wait) {
      await jsm.consumers.update(PUSH_STREAM, PUSH_CONSUMER, wanted);
    }
  } catch (error) {
    if (!isNotFound(error, JetStreamApiCodes.ConsumerNotFound)) throw error;
    await jsm.consumers.add(PUSH_STREAM, wanted).catch(async (raced) => {
      if (!(raced instanceof JetStreamApiError)) throw raced;
      await jsm.consumers.info(PUSH_STREAM, PUSH_CONSUMER);
    });
  }
}

/**
 * Queues a config's deliveries (again, for a config that was dropped and made anew: no message id, so no duplicate
 * window swallows it). Fails with `unavailable` when the queue cannot be written.
 */
export async function enqueuePushJob(bus: NatsBus, taskId: string, configId: string): Promise<void> {
  const publish = () => jetstreamOf(bus).publish(pushJobSubject(taskId, configId), new Uint8Array());
  try {
    await publish().catch(async () => {
      // No stream yet: no gateway's worker has made the queue so far (a first config, made as the first gateway
      // starts). Make it, then queue.
      await ensurePushQueue(bus);
      await publish();
    });
  } catch (cause) {
    throw new PushError(
      'unavailable',
      `cannot queue the webhook deliveries of task ${taskId}'s push config ${configId}: ${(cause as Error).message}`,
      { cause },
    );
  }
}

/** JetStream's durations are in nanoseconds. */
const nanos = (ms: number): number => ms * 1_000_000;

function isNotFound(error: unknown, code: number): boolean {
  return error instanceof JetStreamApiError && error.code === code;
}
