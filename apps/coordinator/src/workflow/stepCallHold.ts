import type { Clock } from '@troupe/runtime';
import { fromCallback } from 'xstate';
import { steeringOf } from '../task/runContext.ts';
import type { StepCallEvent } from './stepCall.ts';
import { watchHeldDeadline } from './stepCallDeadline.ts';

/**
 * A held step call's wait for its task to be let go (`troupe resume`): `unheld` once the task is no longer paused,
 * at once when it is not (a `paused` reply that came after the resume, or a call restored held whose task was
 * resumed meanwhile). A subscription to the task's steering (`task/taskSteering.ts`), cleaned up when the call
 * leaves `held`; a step alone, with no task around it, is never held. The one timer it runs is the task's `deadline`,
 * given only when the pipeline counts held time against it: `pastDeadline` when it passes.
 */
export function holdLogic(clock: Clock) {
  return fromCallback<StepCallEvent, { stepId?: string; deadline?: number | undefined } | undefined>(
    ({ input, sendBack, system }) => {
      const steering = steeringOf(system);
      if (!steering?.held) {
        sendBack({ type: 'unheld' });
        return;
      }
      // Still at work while held: the messages told to it before the pause are kept until it reads them.
      const ended = input?.stepId === undefined ? undefined : steering.atWork(input.stepId);
      const unlisten = steering.listen((held) => {
        if (!held) sendBack({ type: 'unheld' });
      });
      const unwatch = watchHeldDeadline(clock, input?.deadline, () => sendBack({ type: 'pastDeadline' }));
      return () => {
        unlisten();
        unwatch();
        ended?.();
      };
    },
  );
}
