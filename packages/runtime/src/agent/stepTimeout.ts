import type { StepError } from '@troupe/protocol';
import type { WaitingOn } from '../approvals/humanGate.ts';

/**
 * Why a step ran out of its time, as a step error: `approval_timeout` when a person was being asked at that moment
 * (naming the request, so the task's failure says whom it waited for), else `step_timeout`. The agent host and the
 * workflow that waits for the step say the same, whichever notices first.
 */
export function stepTimeoutError(
  agent: string,
  timeoutMs: number,
  waitingFor: WaitingOn | undefined,
): StepError {
  const within = `within the step timeout (${Math.round(timeoutMs / 1000)} s)`;
  if (waitingFor) {
    const what = waitingFor.kind === 'approval' ? 'decided approval' : 'answered question';
    return {
      code: 'approval_timeout',
      message: `agent ${agent} was still waiting for a person: nobody ${what} ${waitingFor.id} ${within}`,
    };
  }
  return { code: 'step_timeout', message: `agent ${agent} did not finish ${within}` };
}
