import { fromCallback } from 'xstate';
import { steeringOf } from '../task/runContext.ts';
import type { StepCallEvent } from './stepCall.ts';

/**
 * A held step call's wait for its task to be let go (`troupe resume`): `unheld` once the task is no longer paused,
 * at once when it is not (a `paused` reply that came after the resume, or a call restored held whose task was
 * resumed meanwhile). A subscription to the task's steering (`task/taskSteering.ts`), cleaned up when the call
 * leaves `held`; a step alone, with no task around it, is never held.
 */
export const holdLogic = fromCallback<StepCallEvent>(({ sendBack, system }) => {
  const steering = steeringOf(system);
  if (!steering?.held) {
    sendBack({ type: 'unheld' });
    return;
  }
  return steering.listen((held) => {
    if (!held) sendBack({ type: 'unheld' });
  });
});
