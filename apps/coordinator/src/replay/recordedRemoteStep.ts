import type { AgentStepReply, AgentStepRequest, TroupeEvent } from '@troupe/protocol';
import { failedReply } from '@troupe/runtime';

/**
 * A remote agent's step as the recorded run had it: a replay calls no remote agent (it would be a second call with
 * effects elsewhere), so the step's call and its result are told again from the record, and the step replies as it
 * did. A step the record does not hold (the task ended before it did) fails, saying so.
 */
export async function recordedRemoteStep(
  events: readonly TroupeEvent[],
  request: AgentStepRequest,
  publish: (event: TroupeEvent) => void,
): Promise<AgentStepReply> {
  // After the transition that started the step is done, so its call follows its start, as when it ran.
  await Promise.resolve();
  const told = (kind: 'tool.call' | 'tool.result') =>
    events.filter((e) => e.kind === kind && e.data.stepId === request.stepId);
  for (const event of told('tool.call')) publish(event);
  // The result a turn later, so steps running at once (a foreach step's items) have all made their calls by then.
  await Promise.resolve();
  for (const event of told('tool.result')) publish(event);
  const ended = events.find((e) => e.kind === 'step.completed' && e.data.stepId === request.stepId);
  if (ended?.kind !== 'step.completed')
    return failedReply(
      request.stepId,
      'failed',
      `step ${request.stepId} of remote agent ${request.agent} did not end in the recording; a replay does not call remote agents`,
    );
  const { ok, output, outputRef, verdict, error, usage, turns } = ended.data;
  if (!ok)
    return {
      ok: false,
      stepId: request.stepId,
      error: error ?? { code: 'failed', message: 'the remote step failed' },
      usage,
      turns,
    };
  return {
    ok: true,
    stepId: request.stepId,
    output,
    ...(outputRef ? { outputRef } : {}),
    ...(verdict ? { verdict } : {}),
    usage,
    turns,
  };
}
