import { FINAL_EVENT_KINDS, parseEvent, subjects } from '@troupe/protocol';
import { endingOf } from '../approvals/taskEnded.ts';
import type { Bus, BusSubscription } from '../transport/bus.ts';
import type { StepsInFlight } from './stepsInFlight.ts';

/**
 * Stops a task's steps here on its final event, wherever its workflow runs: completed, failed (a timeout, a budget,
 * another step's error) or cancelled. Not on a cancel request itself: when no coordinator runs the task, the request
 * changes nothing, and neither may its steps. Returns a subscription per final event kind.
 */
export function watchTaskEnds(
  bus: Bus,
  pipeline: string,
  steps: Pick<StepsInFlight, 'size' | 'endTask'>,
): BusSubscription[] {
  return FINAL_EVENT_KINDS.map((kind) =>
    bus.subscribeText(subjects.event(pipeline, '*', kind), (delivery) => {
      // With no step here, there is nothing to stop: the event is not even read.
      if (steps.size === 0) return;
      const parsed = parseEvent(delivery.value, delivery.subject);
      const ending = parsed.ok ? endingOf(parsed.value) : undefined;
      if (parsed.ok && ending) steps.endTask(parsed.value.taskId, ending);
    }),
  );
}
