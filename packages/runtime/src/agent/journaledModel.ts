import type { ModelResponse } from '@troupe/llm';
import type { ConversationSummary, ModelReply, ToldMessage } from '@troupe/protocol';
import { type RecordedTurn, StepJournal } from '../durable/stepJournal.ts';
import { preview } from '../events/eventFactory.ts';
import type { CompactionInput, ModelCallInput, ModelCallOutput } from './agentMachine.ts';
import { summaryRequest } from './compaction.ts';
import { callContext, ModelAsk, type ModelOutcome, waitingOnModel } from './modelAsk.ts';
import type { RecordedReplies } from './recordedReplies.ts';
import { bestEffort, type StepContext, unlessUnavailable } from './stepContext.ts';
import { toldTurn } from './stepTold.ts';
import { endModelSpan, startModelSpan } from './stepTracing.ts';
import { endsStep } from './structuredReply.ts';

/**
 * The agent's model calls, journaled: a turn or summary the journal recorded for this very conversation is taken
 * from it (a step run again after a crash asks the model nothing it asked before); a new one is recorded once made.
 */

/** A summary's response as it came: the summary is made of it after the wait. */
const AS_ANSWERED: ModelOutcome<ModelResponse> = {
  answered: (response) => response,
  failed: (error) => {
    throw error;
  },
};

/**
 * One turn's model reply: the journal's, or the model's, recorded; with the messages people told the task that were
 * read into the conversation just before it (see {@link toldBefore}).
 */
export async function callModel(
  step: StepContext,
  replies: RecordedReplies,
  input: ModelCallInput,
  signal: AbortSignal,
): Promise<ModelCallOutput> {
  const { request } = step;
  const key = StepJournal.modelKey(request.stepId, input.turn);
  const recorded = await bestEffort(step, 'read the journaled model reply', () =>
    replies.recorded(input.turn),
  );
  const told = await toldBefore(step, key, input, recorded);
  // Most turns are told nothing: their call goes out as the machine asked it, with nothing more to keep while it runs.
  const asked =
    told.length === 0 ? input : { ...input, messages: [...input.messages, ...told.map(toldTurn)] };
  const found = recorded?.reply(asked.messages);
  if (found) {
    replies.tookRecorded(input.turn);
    step.told.read(told);
    return withTold({ ...found, journaled: true }, asked, input);
  }
  // Stopped while the journal was read: the model is not asked at all.
  signal.throwIfAborted();
  // Chained, not awaited: a step waiting on its model (a parked task's) keeps this call's promises, not its frames.
  return ModelAsk.ask(step, asked, signal).then((result) =>
    journaled(step, replies, { asked, input, told }, result),
  );
}

/**
 * What a new model reply answered: the conversation and the told messages (its journal key is made again from the
 * turn when it is recorded, not kept while the model thinks).
 */
interface NewReply {
  asked: ModelCallInput;
  input: ModelCallInput;
  told: readonly ToldMessage[];
}

/**
 * A new reply, once journaled: the one the journal holds for its turn, if a run beside this one recorded it first. A
 * local step's final reply is not journaled (see {@link checkpointedWithOutput}).
 */
async function journaled(
  step: StepContext,
  replies: RecordedReplies,
  { asked, input, told }: NewReply,
  result: ModelReply,
): Promise<ModelCallOutput> {
  const { deps, request } = step;
  const key = StepJournal.modelKey(request.stepId, input.turn);
  const journal = checkpointedWithOutput(deps.journal, asked, result) ? undefined : deps.journal;
  const standing = await bestEffort(step, 'journal the model reply', () =>
    journal?.recordModelReply(key, asked.messages, result, new Date(deps.clock.now()), told),
  );
  if (standing?.journaled) replies.tookRecorded(input.turn);
  step.told.read(told);
  return withTold(standing ?? result, asked, input);
}

/**
 * Whether the reply is made durable by the workflow's checkpoint rather than by the journal: the step was taken by a
 * workflow in this process (its journal waits for that workflow's checkpoints, see `StepJournal.forLocalStep`), and
 * the reply ends the step, so it reaches the workflow as the step's output and its next checkpoint records it; no
 * later step writes anything before that checkpoint is stored. A crash before then asks the model for this turn
 * again (a model call, never a tool call, repeated). A reply longer than its `llm.response` event keeps is journaled
 * all the same: `troupe replay` reads it whole from there.
 */
function checkpointedWithOutput(
  journal: StepJournal | undefined,
  asked: ModelCallInput,
  reply: ModelReply,
): boolean {
  return (
    journal?.checkpointsFinalReply === true &&
    endsStep(reply, asked.responseSchema) &&
    preview(reply.content) === reply.content
  );
}

/** The reply, with the user turns the call was asked with beyond the machine's conversation: what was told. */
function withTold(reply: ModelReply, asked: ModelCallInput, input: ModelCallInput): ModelCallOutput {
  return asked === input ? reply : { ...reply, told: asked.messages.slice(input.messages.length) };
}

/** Nothing told before a turn: one empty list for every such turn. */
const NOTHING_TOLD: readonly ToldMessage[] = [];

/**
 * The told messages the agent reads just before this turn's model call. Those an earlier run read at this turn, as
 * the journal (or `troupe replay`'s recording) kept them, come again, less any this run read already. At a turn the
 * journal has no record of, every message not read yet comes, journaled first (before the model is asked), so a run
 * after a crash puts them at the same turn. A turn whose recorded reply answered the conversation as it is gets none:
 * the run that made it was told nothing there. Announced as `agent.told`.
 */
async function toldBefore(
  step: StepContext,
  key: string,
  input: ModelCallInput,
  recorded: RecordedTurn | undefined,
): Promise<readonly ToldMessage[]> {
  const { deps, request } = step;
  const before = recorded?.told ?? deps.recordedTold?.(request.stepId, input.turn);
  let told: readonly ToldMessage[];
  if (before) told = step.told.notRead(before);
  else if (step.told.unread.length === 0 || recorded?.reply(input.messages)) told = NOTHING_TOLD;
  else {
    const unread = [...step.told.unread];
    const journal = deps.journal;
    // Unlike a reply, a message read unrecorded could be read again at another turn after a crash: the step waits.
    const standing = journal
      ? await unlessUnavailable(() =>
          journal.recordTold(key, unread, input.messages, new Date(deps.clock.now())),
        )
      : unread;
    told = step.told.notRead(standing ?? unread);
  }
  if (told.length > 0) publishTold(step, input.turn, told);
  return told;
}

/** `agent.told`: the agent read these messages before its model call `turn`. An event that cannot go is logged. */
function publishTold(step: StepContext, turn: number, told: readonly ToldMessage[]): void {
  const { agent, deps, request, scope } = step;
  try {
    deps.publish(
      deps.events.make(
        'agent.told',
        scope,
        { agent: agent.name, stepId: request.stepId, turn, messageIds: told.map((m) => m.id) },
        { from: 'human', to: agent.name },
      ),
    );
  } catch (error) {
    deps.logger?.error({ err: error, stepId: request.stepId }, 'cannot publish agent.told; the step goes on');
  }
}

/** Asks the agent's own model to condense older turns, so the conversation fits its context budget again. */
export async function summarize(
  step: StepContext,
  input: CompactionInput,
  signal: AbortSignal,
): Promise<ConversationSummary> {
  const { agent, deps, request } = step;
  const key = StepJournal.compactionKey(request.stepId, input.index);
  const journal = deps.journal;
  const recorded = await bestEffort(step, 'read the journaled summary', () =>
    journal?.compaction(key, input.messages),
  );
  if (recorded) return { ...recorded, journaled: true };
  signal.throwIfAborted();
  const started = deps.clock.now();
  const messages = summaryRequest(input.messages);
  const span = startModelSpan(step, input.callsBefore + 1, messages, 'summary');
  let result: ConversationSummary;
  try {
    const response = await waitingOnModel(
      step,
      () =>
        agent.model.complete({
          messages,
          tools: [],
          context: { ...callContext(step, input.callsBefore), purpose: 'summary' },
          signal,
        }),
      AS_ANSWERED,
    );
    if (response.content.trim() === '') throw new Error('the model returned an empty summary');
    const provider = response.provider ?? agent.model.provider;
    result = {
      summary: response.content,
      usage: response.usage,
      costUsd: deps.price?.(provider, response.model, response) ?? 0,
      provider,
      model: response.model,
      durationMs: Math.max(0, deps.clock.now() - started),
    };
    endModelSpan(span, {
      reply: {
        content: response.content,
        toolCalls: [],
        usage: response.usage,
        costUsd: result.costUsd,
        finishReason: response.finishReason,
        provider,
        model: response.model,
        durationMs: result.durationMs ?? 0,
      },
    });
  } catch (error) {
    endModelSpan(span, { error });
    throw error;
  }
  await bestEffort(step, 'journal the summary', () =>
    journal?.recordCompaction(key, input.messages, result, new Date(deps.clock.now())),
  );
  return result;
}
