import { parseEvent, subjects } from '@troupe/protocol';
import type { Bus, BusSubscription } from '../transport/bus.ts';
import type { StepsInFlight } from './stepsInFlight.ts';

/**
 * Hands a person's steering of a task to its steps here, wherever its workflow runs: `task.paused` (each step stops
 * after its current model or tool call) and `task.told` (each step's agent reads the message before its next model
 * call). The events come after the coordinator recorded them, so a step never acts on a pause or a message the task
 * would not keep. One subscription per kind for the whole host, none per step: returns the two.
 */
export function watchSteering(
  bus: Bus,
  pipeline: string,
  steps: Pick<StepsInFlight, 'size' | 'pauseTask' | 'tellTask'>,
): BusSubscription[] {
  return [
    bus.subscribeText(subjects.event(pipeline, '*', 'task.paused'), (delivery) => {
      // With no step here, there is nothing to hold: the event is not even read.
      if (steps.size === 0) return;
      const parsed = parseEvent(delivery.value, delivery.subject);
      if (parsed.ok && parsed.value.kind === 'task.paused') steps.pauseTask(parsed.value.taskId);
    }),
    bus.subscribeText(subjects.event(pipeline, '*', 'task.told'), (delivery) => {
      if (steps.size === 0) return;
      const parsed = parseEvent(delivery.value, delivery.subject);
      if (!parsed.ok || parsed.value.kind !== 'task.told') return;
      const { taskId, ts, data } = parsed.value;
      steps.tellTask(taskId, {
        id: data.messageId,
        text: data.text,
        ...(data.by === undefined ? {} : { by: data.by }),
        at: ts,
      });
    }),
  ];
}
