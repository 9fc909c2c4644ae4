import { parseEvent, subjects, type TroupeEvent } from '@troupe/protocol';
import type { Bus, BusSubscription } from '../transport/bus.ts';
import type { StepsInFlight } from './stepsInFlight.ts';

type Steps = Pick<StepsInFlight, 'pauseTask' | 'resumeTask' | 'tellTask'>;

/** The events a host steers its steps by. */
const STEERING_KINDS = ['task.paused', 'task.resumed', 'task.told'] as const;

/**
 * Hands a person's steering of a task to its steps here, wherever its workflow runs: `task.paused` (each step stops
 * after its current model or tool call), `task.resumed` after a pause, and `task.told` (each step's agent reads the
 * message before its next model call). The events come after the coordinator recorded them, so a step never acts on
 * a pause or a message the task would not keep. Each is read even while no step runs here: the host keeps the
 * steering it heard lately for a step whose request is still on its way (see `RecentSteering`). Steering is rare
 * (people do it), so reading every event costs little. One subscription per kind for the whole host, none per step:
 * returns the three.
 */
export function watchSteering(bus: Bus, pipeline: string, steps: Steps): BusSubscription[] {
  return STEERING_KINDS.map((kind) =>
    bus.subscribeText(subjects.event(pipeline, '*', kind), (delivery) => {
      const parsed = parseEvent(delivery.value, delivery.subject);
      if (parsed.ok && parsed.value.kind === kind) steer(steps, parsed.value);
    }),
  );
}

/** What one steering event does to its task's steps here. */
function steer(steps: Steps, event: TroupeEvent): void {
  switch (event.kind) {
    case 'task.paused':
      steps.pauseTask(event.taskId, Date.parse(event.data.since ?? event.ts));
      return;
    case 'task.resumed': {
      // A resume after a redelivery ends no pause.
      const { after, since } = event.data;
      if (after === 'pause')
        steps.resumeTask(event.taskId, since === undefined ? undefined : Date.parse(since));
      return;
    }
    case 'task.told': {
      const { data } = event;
      // A restored task's copy: its steps at work get what they still owe in their request sent again (`told`), and
      // as live steering (or in the host's memory, at the copy's later time) it would reach a step that read it.
      if (data.again) return;
      steps.tellTask(event.taskId, {
        id: data.messageId,
        text: data.text,
        ...(data.by === undefined ? {} : { by: data.by }),
        at: event.ts,
      });
      return;
    }
  }
}
