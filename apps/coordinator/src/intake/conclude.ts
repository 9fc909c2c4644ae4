import type { TaskEnding, TroupeEvent } from '@troupe/protocol';
import { endingOf, every } from '@troupe/runtime';
import { publishSafely, type TaskServices } from '../task/taskServices.ts';
import type { TaskDelivery } from './taskQueue.ts';

/**
 * How long, in keep-alive intervals (each a third of the ack wait), a message goes without `working()` before a
 * task's end sends one at once: half the ack wait.
 */
const KEPT_ALIVE_FOR = 1.5;

/** How long a task's end waits for its final event to be stored before it says it is still waiting. */
export const FINAL_EVENT_WAIT_MS = 10_000;

/** How a task's end went: `settled` (its message may be acked), or `left` to a redelivery (the runner stopped). */
export type Conclusion = 'settled' | 'left';

/** A task's end: its delivery and final event, when the message was last kept alive, and what its steps asked. */
export interface Concluding {
  delivery: TaskDelivery;
  final: TroupeEvent;
  /** When the message was last kept alive (`working()`), or arrived, on the runner's clock. */
  keptAliveAt: number;
  /**
   * The task ran whole in this delivery (its first, nothing restored) and no step of it may have asked a person:
   * nothing of it can be pending, so its requests are not read. Absent: they are read and closed.
   */
  askedNobody?: true;
}

export type ConcludeServices = Pick<
  TaskServices,
  'bus' | 'clock' | 'logger' | 'keepAliveMs' | 'finalEventWaitMs' | 'closeRequests' | 'stopped'
>;

/**
 * The one way a task ends, whatever ended it, once its record holds its final status and final event: the
 * event is published, the task's pending approvals and questions are closed (unless it provably asked nobody), and
 * its message may be settled once the event is stored. A crash in between leaves the message to be delivered again,
 * and that delivery comes back here with the stored event (same id). The wait lasts as long as the outbox holds the
 * event (through a NATS outage or a backlog), the message kept alive meanwhile; it ends when the event is stored or
 * given up on.
 */
export async function conclude(
  services: ConcludeServices,
  { delivery, final, keptAliveAt, askedNobody }: Concluding,
): Promise<Conclusion> {
  const { clock, logger, bus } = services;
  const { taskId } = final;
  // Kept alive meanwhile: the wait for the event, and closing requests, can outlast a short ack wait. At once only
  // when the last keep-alive is over half the ack wait old (keep-alives go every third of it): else the first tick
  // below comes before the ack wait runs out (half + a third of it), and most tasks end with no keep-alive at all.
  if (clock.now() - keptAliveAt >= KEPT_ALIVE_FOR * services.keepAliveMs) delivery.working();
  const stopKeepAlive = every(clock, services.keepAliveMs, () => delivery.working());
  try {
    const stored = publishSafely(services, taskId, () => final);
    // Leaving the message to a redelivery would only queue the same event again behind this one: say so, and wait.
    const slow = clock.setTimeout(
      () =>
        logger.warn(
          { taskId, unsentEvents: bus.pendingEvents },
          `the final event of task ${taskId} is not stored yet; the task's message is kept until it is`,
        ),
      services.finalEventWaitMs ?? FINAL_EVENT_WAIT_MS,
    );
    // Stopping for 10 s (NATS may be out of reach, and the wait endless): the message is left to be delivered again.
    const outcome = await orStopping(stored, services.stopped).finally(() => clock.clearTimeout(slow));
    if (outcome === 'stopping') {
      logger.warn(
        { taskId },
        `the final event of task ${taskId} is not stored yet and this coordinator is stopping; its message is left to be delivered again`,
      );
      return 'left';
    }
    // Given up on (refused, too big, or the outbox overflowed): delivering the task again would not change that.
    if (!outcome) logger.error({ taskId }, `the final event of task ${taskId} could not be stored`);
    if (!askedNobody) await closeRequests(services, taskId, endingOf(final) ?? { status: 'failed' });
    return 'settled';
  } finally {
    stopKeepAlive();
  }
}

async function closeRequests(
  { closeRequests, logger }: Pick<ConcludeServices, 'closeRequests' | 'logger'>,
  taskId: string,
  ending: TaskEnding,
): Promise<void> {
  if (!closeRequests) return;
  try {
    const closed = await closeRequests(taskId, ending);
    if (closed > 0) logger.info({ taskId, closed }, `closed ${closed} pending request(s) of the ended task`);
  } catch (error) {
    logger.warn({ err: error, taskId }, 'cannot close the pending approvals and questions of the task');
  }
}

/** `work`'s outcome, or `stopping` once `stopped` aborts; its listener on `stopped` is taken off either way. */
async function orStopping<T>(work: Promise<T>, stopped: AbortSignal): Promise<T | 'stopping'> {
  if (stopped.aborted) return 'stopping';
  return new Promise((resolve, reject) => {
    const onStop = () => resolve('stopping');
    stopped.addEventListener('abort', onStop, { once: true });
    work.then(resolve, reject).finally(() => stopped.removeEventListener('abort', onStop));
  });
}
