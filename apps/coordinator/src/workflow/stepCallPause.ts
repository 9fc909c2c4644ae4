import type { Clock } from '@troupe/runtime';
import { fromCallback } from 'xstate';
import { steeringOf } from '../task/runContext.ts';
import type { StepCallEvent } from './stepCall.ts';

/**
 * The step call's pause before sending again: a wait until `until` on the clock, then `resume`. An invoked actor
 * rather than an `after:` delay, because XState keeps delayed events out of a persisted snapshot; its input is the
 * absolute time, so a restored pause waits only for what is left of it. The step is still at work meanwhile: the
 * messages told to it are kept for it (see `taskSteering.ts`).
 */
export function pauseLogic(clock: Clock) {
  return fromCallback<StepCallEvent, { until: number; stepId?: string }>(({ input, sendBack, system }) => {
    const ended = input.stepId === undefined ? undefined : steeringOf(system)?.atWork(input.stepId);
    const timer = clock.setTimeout(
      () => sendBack({ type: 'resume' }),
      Math.max(0, input.until - clock.now()),
    );
    return () => {
      clock.clearTimeout(timer);
      ended?.();
    };
  });
}
