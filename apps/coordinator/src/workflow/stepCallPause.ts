import type { Clock } from '@troupe/runtime';
import { fromCallback } from 'xstate';
import type { StepCallEvent } from './stepCall.ts';

/**
 * The step call's pause before sending again: a wait until `until` on the clock, then `resume`. An invoked actor
 * rather than an `after:` delay, because XState keeps delayed events out of a persisted snapshot; its input is the
 * absolute time, so a restored pause waits only for what is left of it.
 */
export function pauseLogic(clock: Clock) {
  return fromCallback<StepCallEvent, { until: number }>(({ input, sendBack }) => {
    const timer = clock.setTimeout(
      () => sendBack({ type: 'resume' }),
      Math.max(0, input.until - clock.now()),
    );
    return () => clock.clearTimeout(timer);
  });
}
