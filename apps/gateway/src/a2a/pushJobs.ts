import { A2A_PUSH_QUEUE, ROOT, subjects } from '@troupe/protocol';
import { addWork, ensureWorkQueue, type JetStreamBus, type WorkQueueSpec } from '@troupe/runtime';
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
 * every start and from several gateways at once.
 */
export async function ensurePushQueue(bus: JetStreamBus, ackWaitMs?: number): Promise<void> {
  await ensureWorkQueue(bus, pushQueue(ackWaitMs), ackWaitMs !== undefined);
}

/** The queue as every gateway takes from it, holding a config up to `ackWaitMs` without a sign of life. */
export const pushQueue = (ackWaitMs = DEFAULT_PUSH_ACK_WAIT_MS): WorkQueueSpec => ({
  stream: PUSH_STREAM,
  subjects: PUSH_SUBJECTS,
  consumer: PUSH_CONSUMER,
  ackWaitMs,
});

/**
 * Queues a config's deliveries (again, for a config that was dropped and made anew: no message id, so no duplicate
 * window swallows it). Fails with `unavailable` when the queue cannot be written.
 */
export async function enqueuePushJob(bus: JetStreamBus, taskId: string, configId: string): Promise<void> {
  const publish = () => addWork(bus, pushJobSubject(taskId, configId));
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
