import { type AgentStepReply, type AgentStepRequest, errorMessage } from '@troupe/protocol';
import { ValueStoreError } from '../durable/valueStoreError.ts';
import type { StepContext } from './stepContext.ts';
import { failedReply } from './stepReply.ts';

/**
 * The request with the whole of each earlier output it names by reference, and the whole of each input value its
 * message holds a preview of, so the agent reads what the task was given and what the earlier steps produced, not
 * their previews. Without a store, the previews stay (they say where the whole is).
 */
export async function withWholeContext({
  request,
  deps,
}: Pick<StepContext, 'request' | 'deps'>): Promise<AgentStepRequest> {
  const values = deps.values;
  if (!values) return request;
  const { inputCut, ...rest } = request;
  const whole = inputCut ? { ...rest, input: await values.wholeInput(request.input, inputCut) } : request;
  if (!whole.context.some((output) => output.outputRef)) return whole;
  const context = await Promise.all(
    whole.context.map(async ({ outputRef, ...output }) =>
      outputRef ? { ...output, output: await values.read(outputRef) } : output,
    ),
  );
  return { ...whole, context };
}

/**
 * A reply whose output is too large for a message keeps a preview and a reference to the whole, stored under
 * `<stepId>.output` (a step run again writes the same object). Its `structured` form goes too: it is the output
 * parsed, and would not fit either. A reply that cannot be stored fails the step so that it is sent again.
 */
export async function offloadReply(
  { request, deps }: Pick<StepContext, 'request' | 'deps'>,
  reply: AgentStepReply,
): Promise<AgentStepReply> {
  const values = deps.values;
  if (!values || !reply.ok) return reply;
  try {
    const { text, ref } = await values.offload(request.pipeline, `${request.stepId}.output`, reply.output);
    if (!ref) return reply;
    const { structured: _whole, ...rest } = reply;
    return { ...rest, output: text, outputRef: ref };
  } catch (error) {
    return failedReply(
      request.stepId,
      'journal_unavailable',
      `cannot store the ${Buffer.byteLength(reply.output)}-byte output of step ${request.stepId}: ${errorMessage(error)}`,
    );
  }
}

/** The reply of a step whose earlier outputs cannot be read back: sent again later unless they are gone for good. */
export function unreadContextReply(request: AgentStepRequest, error: unknown): AgentStepReply {
  const gone = ValueStoreError.is(error, 'value_missing') || ValueStoreError.is(error, 'value_corrupt');
  return failedReply(
    request.stepId,
    gone ? 'failed' : 'journal_unavailable',
    `cannot read the whole ${request.inputCut ? 'task input or output of an earlier step' : 'output of an earlier step'} for step ${request.stepId}: ${errorMessage(error)}`,
  );
}
