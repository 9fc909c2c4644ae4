import { z } from 'zod';
import { ModelReply, TokenUsage } from './modelReply.ts';
import { ToldMessage } from './step.ts';
import { ToolResult } from './toolResult.ts';
import { ValueRef } from './valueRef.ts';

/** What the journal keeps of a tool call's result: what a run that finds it needs to hand it back. */
export const ToolResultRecord = ToolResult.pick({
  ok: true,
  output: true,
  error: true,
  decision: true,
  truncated: true,
  outputRef: true,
});
export type ToolResultRecord = z.infer<typeof ToolResultRecord>;

/** What the journal keeps of a model's reply: the reply itself (whether it was replayed is the reader's to say). */
const ModelReplyRecord = ModelReply.omit({ journaled: true });

/**
 * One record of a step's journal, as the KV bucket `journal` stores it for agent hosts and coordinators alike.
 * Everything an agent learns from outside itself — a model's reply, a summary, a tool's result, a person's
 * decision — is written here before the agent acts on it, so a step that runs again (after a crash, or on another
 * worker) rebuilds its conversation, turn count and spend from these records instead of asking the model or
 * running a tool a second time.
 */
export const JournalEntry = z.discriminatedUnion('kind', [
  /** A tool call about to run; replaced by its result. Found alone, the call was cut short: it is in doubt. */
  z.object({
    kind: z.literal('tool.started'),
    tool: z.string(),
    arguments: z.string(),
    /** The run of the step that claimed it: finding its own claim (a write retried after a lost reply) is not doubt. */
    run: z.string(),
    startedAt: z.string(),
  }),
  z.object({
    kind: z.literal('tool.result'),
    tool: z.string(),
    arguments: z.string(),
    result: ToolResultRecord,
    recordedAt: z.string(),
  }),
  /**
   * A model's reply to the conversation whose digest is `conversation`; `told`, the messages people told the task that
   * the agent read into that conversation just before this turn (see `told` below), which it replaced.
   */
  z.object({
    kind: z.literal('model.reply'),
    conversation: z.string(),
    reply: ModelReplyRecord,
    told: z.array(ToldMessage).optional(),
    recordedAt: z.string(),
  }),
  /**
   * Messages people told the task (`troupe tell`) that the agent reads before this turn's model call, under the
   * turn's model key, written before the model is asked: a run that finds it puts the same messages at the same turn,
   * so a crash neither loses nor repeats one. The turn's reply replaces it, keeping them in its `told`.
   */
  z.object({
    kind: z.literal('told'),
    messages: z.array(ToldMessage).min(1),
    recordedAt: z.string(),
  }),
  z.object({
    kind: z.literal('compaction'),
    conversation: z.string(),
    summary: z.string(),
    usage: TokenUsage,
    costUsd: z.number(),
    provider: z.string().optional(),
    model: z.string().optional(),
    durationMs: z.number().optional(),
    recordedAt: z.string(),
  }),
  /** What a person was asked for a call (an approval, or an `ask_human` question), by request id. */
  z.object({
    kind: z.literal('human'),
    requestId: z.string(),
    recordedAt: z.string(),
  }),
  /** Every request to a person the task's steps made, at `<taskId>.people`: what its end closes. */
  z.object({
    kind: z.literal('people'),
    requestIds: z.array(z.string()),
  }),
  /**
   * A call to an agent in another system (A2A): written before the message goes, with the ids it goes with, so a run
   * that finds it looks for the remote task instead of sending again; `taskId` once the remote system named its task,
   * `answers` the replies to its questions sent since.
   */
  z.object({
    kind: z.literal('remote.call'),
    endpoint: z.string(),
    messageId: z.string(),
    contextId: z.string(),
    taskId: z.string().optional(),
    answers: z.number().int().nonnegative(),
    /** The question (its status: time, message id, text) the next answer replies to, set before that answer goes. */
    asking: z.string().optional(),
    /** The question the last answer sent replied to: while the task still shows it, the agent has not moved on. */
    answered: z.string().optional(),
    recordedAt: z.string(),
  }),
  /**
   * A record too large for a KV value (a model's 2 MB reply, a tool call's 2 MB arguments): it is kept whole, as
   * JSON, in the pipeline's object store, and this names it. Reads of the journal give the record itself.
   */
  z.object({
    kind: z.literal('stored'),
    ref: ValueRef,
  }),
]);
export type JournalEntry = z.infer<typeof JournalEntry>;
