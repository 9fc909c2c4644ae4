import { addUsage } from '@troupe/llm';
import { errorMessage } from '@troupe/protocol';
import { and, assign, emit, enqueueActions } from 'xstate';
import {
  compactionFailed,
  errorCode,
  modelCallFailed,
  pausedFailure,
  whyNotMatching,
} from './agentFailures.ts';
import { outOfTurns, stopWhenBudgetSpent, stopWhenPaused } from './agentLimits.ts';
import { servicesOf } from './agentServices.ts';
import { agentSetup } from './agentSetup.ts';
import { compacted as compactedMessages, estimateTokens, olderTurns } from './compaction.ts';
import { MAX_REPAIRS, outputName, responseSchemaOf } from './structuredReply.ts';

/** Before a model call: the budget, a pause and the turns left decide whether there is one, and a summary first. */
const deciding = agentSetup.createStateConfig({
  always: [
    stopWhenBudgetSpent,
    stopWhenPaused,
    { guard: and(['turnsLeft', 'overContext']), target: 'compacting' },
    { guard: 'turnsLeft', target: 'thinking' },
    outOfTurns,
  ],
});

/** The older turns summarized by the model, so the conversation fits its context budget again. */
const compacting = agentSetup.createStateConfig({
  invoke: {
    src: 'compactConversation',
    input: ({ context }) => ({
      messages: olderTurns(context.messages),
      index: context.compactions + 1,
      callsBefore: context.turn + context.compactions,
      ...servicesOf(context),
    }),
    onDone: {
      target: 'compacted',
      actions: enqueueActions(({ context, event, enqueue }) => {
        const messages = compactedMessages(context.messages, event.output.summary);
        enqueue.emit({
          type: 'context.compacted',
          index: context.compactions + 1,
          before: context.messages.length,
          after: messages.length,
          estimatedTokens: estimateTokens(context.messages),
          ...event.output,
        });
        enqueue.assign({
          messages,
          compactions: context.compactions + 1,
          usage: addUsage(context.usage, event.output.usage),
          costUsd: context.costUsd + event.output.costUsd,
        });
      }),
    },
    onError: {
      target: '#agent.failed',
      actions: { type: 'fail', params: ({ context, event }) => compactionFailed(context, event.error) },
    },
  },
});

/** The summary was a model call too: the budget is checked again before the next one. */
const compacted = agentSetup.createStateConfig({
  always: [stopWhenBudgetSpent, stopWhenPaused, { target: 'thinking' }],
});

/** A model call invoked; its reply decides what comes next. */
const modelCall = agentSetup.createStateConfig({
  invoke: {
    src: 'callModel',
    input: ({ context }) => ({
      messages: context.messages,
      tools: context.tools,
      turn: context.turn,
      callsBefore: context.turn - 1 + context.compactions,
      ...(responseSchemaOf(context) ? { responseSchema: responseSchemaOf(context) } : {}),
      ...servicesOf(context),
    }),
    onDone: [
      {
        guard: { type: 'pausedBeforeTools', params: ({ event }) => event.output },
        target: '#agent.stopped',
        actions: [
          { type: 'recordReply', params: ({ event }) => event.output },
          { type: 'fail', params: ({ context }) => pausedFailure(context) },
        ],
      },
      {
        guard: { type: 'wantsTools', params: ({ event }) => event.output },
        target: 'acting',
        actions: [{ type: 'recordReply', params: ({ event }) => event.output }],
      },
      {
        guard: { type: 'emptyReply', params: ({ event }) => event.output },
        target: '#agent.failed',
        actions: [
          { type: 'recordReply', params: ({ event }) => event.output },
          {
            type: 'fail',
            params: ({ context }) => ({
              code: 'empty_reply',
              message: `agent ${context.agent}: the model returned an empty reply with no tool calls`,
            }),
          },
        ],
      },
      {
        guard: { type: 'outputInvalid', params: ({ event }) => event.output },
        target: 'repairing',
        actions: [{ type: 'recordReply', params: ({ event }) => event.output }],
      },
      {
        target: '#agent.done',
        actions: [
          { type: 'recordReply', params: ({ event }) => event.output },
          { type: 'finish', params: ({ event }) => event.output },
        ],
      },
    ],
    onError: {
      target: '#agent.failed',
      actions: [
        { type: 'fail', params: ({ context, event }) => modelCallFailed(context, event.error) },
        emit(({ context, event }) => ({
          type: 'llm.error' as const,
          turn: context.turn,
          code: errorCode(event.error),
          message: errorMessage(event.error),
        })),
      ],
    },
  },
});

/** One model call, announced as `llm.request`. */
const thinking = agentSetup.createStateConfig({
  entry: [
    assign({ turn: ({ context }) => context.turn + 1 }),
    emit(({ context }) => ({
      type: 'llm.request' as const,
      turn: context.turn,
      messages: context.messages.length,
      tools: context.tools.map((t) => t.name),
    })),
  ],
  ...modelCall,
});

/**
 * A woken step's actor (see `AgentActorInput`), in the model call its parked actor had made: invoked again,
 * the call is adopted, not made again, and it was announced already.
 */
const woken = agentSetup.createStateConfig({ ...modelCall });

/** A reply that does not match the required output: the model is asked once more, with what was wrong. */
const repairing = agentSetup.createStateConfig({
  always: [
    { guard: 'canRepair', target: 'deciding', actions: 'askForRepair' },
    {
      target: '#agent.failed',
      actions: {
        type: 'fail',
        params: ({ context }) => ({
          code: 'invalid_output',
          message: `agent ${context.agent}: the reply does not match the required ${outputName(context)} after ${MAX_REPAIRS} repair turn(s)${whyNotMatching(context)}`,
        }),
      },
    },
  ],
});

/**
 * The model round's states, children of the machine's `working`: the model's side of a step. Before each call its
 * limits are checked and an outgrown conversation summarized; the call itself (`thinking`); a reply that does not
 * match the required output asked again (`repairing`). A reply that asks for tools goes on to `acting` (the tool
 * round).
 */
export const modelRound = { deciding, compacting, compacted, thinking, woken, repairing };
