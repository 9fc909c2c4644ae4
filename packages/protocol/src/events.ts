import { z } from 'zod';
import { TaskFailureReason } from './failure.ts';
import { Name, TaskId } from './names.ts';
import { Score } from './score.ts';
import { StepError, Verdict } from './step.ts';
import { TaskOriginRef } from './task.ts';
import { UsageTotals } from './usage.ts';
import { InputCut, ValueRef } from './valueRef.ts';
import { WorkspaceManifest } from './workspace.ts';

const TokenUsage = z.object({
  inputTokens: z.number().int().nonnegative(),
  outputTokens: z.number().int().nonnegative(),
  /** Input tokens read from the prompt cache (a subset of inputTokens). */
  cachedTokens: z.number().int().nonnegative(),
  /** Input tokens written to the prompt cache (a subset of inputTokens); absent means none. */
  cacheWriteTokens: z.number().int().nonnegative().optional(),
  /** Of `cacheWriteTokens`, those written with the 1-hour lifetime. */
  cacheWrite1hTokens: z.number().int().nonnegative().optional(),
});

/** In the events of a foreach step's item: the item's place in the step's list. */
const ItemRef = { item: z.number().int().nonnegative().optional() };
const StepRef = {
  step: z.string(),
  agent: Name,
  round: z.number().int().positive(),
  stepId: z.string(),
  ...ItemRef,
};
const CallRef = { agent: Name, stepId: z.string() };

/**
 * Where in the flow a step is: the parallel and foreach steps holding it, outermost first — a parallel step with the
 * branch, a foreach step with the item's place in its list and, in `step.started`, the item itself as JSON text (its
 * start). Absent for a step at the top of the flow, and in events from before it was added.
 */
const Within = {
  within: z
    .array(
      z.object({
        step: z.string(),
        branch: z.string().optional(),
        item: z.number().int().nonnegative().optional(),
        value: z.string().optional(),
      }),
    )
    .optional(),
};

/** The payload (`data`) of each event kind. */
export const EventData = {
  'task.accepted': z.object({
    goal: z.string(),
    input: z.record(z.string(), z.unknown()).optional(),
    /** The keys of `input` shown as previews, and where the whole input is stored. */
    inputCut: InputCut.optional(),
    metadata: z.record(z.string(), z.string()).optional(),
    /** The task whose `pipeline` step runs this one. */
    parent: z
      .object({ taskId: TaskId, pipeline: Name, step: z.string(), depth: z.number().int().positive() })
      .optional(),
    /** The ended task this one restarts or forks. */
    origin: TaskOriginRef.optional(),
    /**
     * A restart's or fork's workspace as it starts: how many files (and bytes) of its origin's it carries, those
     * handed on before the step it runs from first started there; with none carried, why (`note`).
     */
    workspace: z
      .object({
        files: z.number().int().nonnegative(),
        bytes: z.number().int().nonnegative(),
        note: z.string().optional(),
      })
      .optional(),
  }),
  /**
   * The task goes on in `state`: delivered again after its coordinator stopped (`after` absent or `redelivery`), or
   * let go by `troupe resume` after a pause (`after: pause`, with who resumed it and how long it was held).
   */
  'task.resumed': z.object({
    /** The workflow state the task resumed in (a step id). */
    state: z.string(),
    round: z.number().int().positive(),
    /** How many times the task message has been delivered, this time included. */
    deliveries: z.number().int().positive(),
    after: z.enum(['redelivery', 'pause']).optional(),
    by: z.string().optional(),
    pausedMs: z.number().nonnegative().optional(),
    /** When the pause that ended began (ISO-8601, its `task.paused` since): two pauses of equal length are two facts. */
    since: z.string().optional(),
  }),
  /**
   * `troupe pause` took: the task is held from now on (recorded, so across a restart too). Its steps at work stop
   * after their current model or tool call; `state` is where the workflow stands.
   */
  'task.paused': z.object({
    state: z.string(),
    round: z.number().int().positive(),
    reason: z.string().optional(),
    by: z.string().optional(),
    /** When it took (ISO-8601), as the record's `paused.since`: a second pause at the same step is a fact of its own. */
    since: z.string().optional(),
  }),
  /** A person's message for the task, recorded: the agent at work reads it before its next model call. */
  'task.told': z.object({
    messageId: z.string(),
    text: z.string(),
    by: z.string().optional(),
    /**
     * Published again by a restored task (a copy, with the id it had): the steering is already delivered, or rides in
     * the `told` of the steps the restored task sends again, so a host gives it to no step.
     */
    again: z.literal(true).optional(),
  }),
  /** An agent read told messages into its conversation, before its model call `turn` of step `stepId`. */
  'agent.told': z.object({
    ...CallRef,
    turn: z.number().int().positive(),
    messageIds: z.array(z.string()).min(1),
  }),
  'step.started': z.object({
    ...StepRef,
    ...Within,
    /** A `pipeline` step's sub-task: its id and pipeline, so a trace can nest it. */
    subTask: z.object({ taskId: TaskId, pipeline: Name }).optional(),
    /**
     * The task's workspace files as the step started (with `workspace.handOff`): the manifest its request carries. A
     * restart or fork from this step starts with them.
     */
    workspace: WorkspaceManifest.optional(),
  }),
  /** A step whose `when` was false: it did not run. */
  'step.skipped': z.object({
    step: z.string(),
    round: z.number().int().positive(),
    when: z.string(),
    ...ItemRef,
    ...Within,
  }),
  /** A route picked where the flow goes: a later step, or `end`. */
  'route.chosen': z.object({
    step: z.string(),
    round: z.number().int().positive(),
    /** The value `on` gave, as text, and the case it matched (absent when the default was taken). */
    value: z.string(),
    case: z.string().optional(),
    target: z.string(),
    /** A router agent that picked the target, and why it did. */
    agent: Name.optional(),
    reason: z.string().optional(),
    ...ItemRef,
    ...Within,
  }),
  /** A parallel step's branches were joined: how each ended. */
  'branches.joined': z.object({
    step: z.string(),
    round: z.number().int().positive(),
    join: z.enum(['all', 'any', 'first']),
    /** Each branch: `completed`, `failed` (with why) or `stopped` (a `first` join ended it, or a failure did). */
    branches: z.record(
      z.string(),
      z.object({ status: z.enum(['completed', 'failed', 'stopped']), message: z.string().optional() }),
    ),
    ok: z.boolean(),
    ...ItemRef,
    ...Within,
  }),
  /** A foreach step's items have all ended, or it stopped them: how many there were and how they ended. */
  'items.joined': z.object({
    step: z.string(),
    round: z.number().int().positive(),
    items: z.number().int().nonnegative(),
    completed: z.number().int().nonnegative(),
    /** Each failed item, by its place in the list, with why it failed. */
    failed: z.array(z.object({ index: z.number().int().nonnegative(), message: z.string() })),
    /** Items not run or stopped: the step failed fast, or could not list its items. */
    stopped: z.number().int().nonnegative(),
    ok: z.boolean(),
    ...ItemRef,
    ...Within,
  }),
  'agent.handoff': z.object({
    step: z.string(),
    round: z.number().int().positive(),
    reason: z.string(),
    /** The parallel or foreach step whose join the hand-off follows (then `from` is that step, not an agent). */
    join: z.string().optional(),
    ...ItemRef,
    ...Within,
  }),
  'llm.request': z.object({
    ...CallRef,
    turn: z.number().int().positive(),
    provider: z.string(),
    model: z.string(),
    messages: z.number().int().nonnegative(),
    tools: z.array(z.string()),
  }),
  'llm.response': z.object({
    ...CallRef,
    turn: z.number().int().positive(),
    provider: z.string(),
    model: z.string(),
    usage: TokenUsage,
    costUsd: z.number().nonnegative(),
    finishReason: z.string(),
    content: z.string(),
    toolCalls: z.array(z.object({ id: z.string(), name: z.string() })),
    durationMs: z.number().nonnegative(),
    /** The reply was recorded by an earlier run of the step; the model was not asked again. */
    journaled: z.boolean().optional(),
  }),
  'llm.error': z.object({
    ...CallRef,
    turn: z.number().int().positive(),
    provider: z.string(),
    model: z.string(),
    code: z.string(),
    message: z.string(),
  }),
  'llm.delta': z.object({
    ...CallRef,
    turn: z.number().int().positive(),
    /** Position of this batch among the turn's deltas, from 0. */
    seq: z.number().int().nonnegative(),
    text: z.string(),
    toolCalls: z
      .array(
        z.object({
          index: z.number().int(),
          id: z.string().optional(),
          name: z.string().optional(),
          arguments: z.string(),
        }),
      )
      .optional(),
  }),
  'llm.retry': z.object({
    ...CallRef,
    turn: z.number().int().positive(),
    provider: z.string(),
    model: z.string(),
    /** The attempt that failed, from 1. */
    attempt: z.number().int().positive(),
    code: z.string(),
    message: z.string(),
    delayMs: z.number().nonnegative(),
  }),
  'llm.fallback': z.object({
    ...CallRef,
    turn: z.number().int().positive(),
    /** `provider:model` that kept failing, and the one tried next. */
    from: z.string(),
    to: z.string(),
    code: z.string(),
    message: z.string(),
  }),
  'context.compacted': z.object({
    ...CallRef,
    /** Messages before and after older turns were replaced by a summary. */
    before: z.number().int().nonnegative(),
    after: z.number().int().nonnegative(),
    estimatedTokens: z.number().int().nonnegative(),
    summary: z.string(),
    /** Which compaction of the step this is, from 1; absent in events from before it was added. */
    index: z.number().int().positive().optional(),
    /** The model call that wrote the summary: who answered, what it spent, how long it took. */
    provider: z.string().optional(),
    model: z.string().optional(),
    usage: TokenUsage.optional(),
    costUsd: z.number().optional(),
    durationMs: z.number().optional(),
    /** The summary was recorded by an earlier run of the step; the model was not asked again. */
    journaled: z.boolean().optional(),
  }),
  /** A gateway session's older turns were folded into its summary, for the follow-up task these events belong to. */
  'session.compacted': z.object({
    session: z.string(),
    agent: Name,
    /** How many of the session's turns the summary covers now, and how many were folded in by this call. */
    turns: z.number().int().positive(),
    folded: z.number().int().positive(),
    summary: z.string(),
    provider: z.string(),
    model: z.string(),
    usage: TokenUsage,
    costUsd: z.number().nonnegative(),
    durationMs: z.number().nonnegative(),
  }),
  'tool.call': z.object({
    ...CallRef,
    /** The model call (turn of the step) that asked for it; absent in events from before it was added. */
    turn: z.number().int().positive().optional(),
    /** The call's position among its turn's calls, from 0; absent in events from before it was added. */
    index: z.number().int().nonnegative().optional(),
    callId: z.string(),
    tool: z.string(),
    arguments: z.string(),
  }),
  'tool.progress': z.object({
    ...CallRef,
    turn: z.number().int().positive().optional(),
    /** The call's position among its turn's calls, from 0; absent in events from before it was added. */
    index: z.number().int().nonnegative().optional(),
    callId: z.string(),
    tool: z.string(),
    /** Position of this update among the call's, from 0. */
    seq: z.number().int().nonnegative(),
    progress: z.number(),
    total: z.number().optional(),
    message: z.string().max(1000).optional(),
  }),
  'tool.result': z.object({
    ...CallRef,
    turn: z.number().int().positive().optional(),
    /** The call's position among its turn's calls, from 0; absent in events from before it was added. */
    index: z.number().int().nonnegative().optional(),
    callId: z.string(),
    tool: z.string(),
    ok: z.boolean(),
    decision: z.string(),
    output: z.string(),
    error: z.object({ code: z.string(), message: z.string() }).optional(),
    durationMs: z.number().nonnegative(),
    truncated: z.object({ originalBytes: z.number().int() }).optional(),
    /** Where the whole output is kept, when `output` is only its start. */
    outputRef: ValueRef.optional(),
    /** True when the call had already run (before a restart) and its journaled result was used instead. */
    journaled: z.boolean().optional(),
  }),
  'approval.requested': z.object({
    ...CallRef,
    approvalId: z.string(),
    callId: z.string(),
    tool: z.string(),
    arguments: z.string(),
    /** The rule that asks for approval. */
    reason: z.string(),
    /** When the call is denied if nobody decides. */
    expiresAt: z.string(),
  }),
  'human.asked': z.object({ ...CallRef, questionId: z.string(), question: z.string() }),
  'human.answered': z.object({
    ...CallRef,
    questionId: z.string(),
    answer: z.string(),
    by: z.string().optional(),
  }),
  'approval.decided': z.object({
    ...CallRef,
    approvalId: z.string(),
    decision: z.enum(['allow', 'deny']),
    reason: z.string().optional(),
    by: z.string().optional(),
    /** True when nobody decided in time and the call was denied by default. */
    expired: z.boolean().optional(),
  }),
  'step.completed': z.object({
    ...StepRef,
    ok: z.boolean(),
    output: z.string(),
    /** Where the whole output is kept, when `output` is only its preview. */
    outputRef: ValueRef.optional(),
    verdict: Verdict.optional(),
    error: StepError.optional(),
    /** The output is the origin task's (a restart or fork): nothing ran, and `usage` is zero. */
    reused: z.boolean().optional(),
    usage: UsageTotals,
    turns: z.number().int().nonnegative(),
    durationMs: z.number().nonnegative(),
  }),
  'task.completed': z.object({
    output: z.string(),
    /** Where the whole output is kept, when `output` is only its preview. */
    outputRef: ValueRef.optional(),
    /** False when the flow ended at a review bound with `onMaxRounds: complete`: the work was never approved. */
    approved: z.boolean().optional(),
    rounds: z.number().int().nonnegative(),
    usage: UsageTotals,
    usageByAgent: z.record(z.string(), UsageTotals),
    durationMs: z.number().nonnegative(),
  }),
  'task.failed': z.object({
    reason: TaskFailureReason,
    message: z.string(),
    step: z.string().optional(),
    usage: UsageTotals,
    durationMs: z.number().nonnegative(),
  }),
  'task.cancelled': z.object({ reason: z.string().optional(), usage: UsageTotals }),
  /**
   * A sampled task of a pipeline with an `evals:` block, scored after its end (online scoring, docs/evals.md): it
   * follows the task's final event. `costUsd` is what the scorers' own model calls (a judge's) cost, apart from the
   * task's usage. With `error`, the task's run could not be scored at all (`scores` empty).
   */
  'eval.scored': z.object({
    /** How the task ended. */
    status: z.enum(['completed', 'failed', 'cancelled']),
    scores: z.array(Score),
    /** The task completed and every score passed (false with `error`). */
    pass: z.boolean(),
    /** The pipeline's sample rate, 0 to 1: the share of its tasks scored. */
    sample: z.number().min(0).max(1),
    costUsd: z.number().nonnegative(),
    /** How long scoring took. */
    durationMs: z.number().nonnegative(),
    error: z.string().optional(),
  }),
} as const;

export type EventKind = keyof typeof EventData;
export const EVENT_KINDS = Object.keys(EventData) as EventKind[];

/** Kinds that end a task: nothing follows them for that task but its online score (`eval.scored`), if sampled. */
export const FINAL_EVENT_KINDS: readonly EventKind[] = ['task.completed', 'task.failed', 'task.cancelled'];

const envelope = {
  /** Unique per event; consumers may dedupe on it. */
  id: z.string().min(1),
  /** ISO-8601 time the event was made. */
  ts: z.string(),
  pipeline: Name,
  taskId: TaskId,
  from: z.string().optional(),
  to: z.string().optional(),
  /** W3C trace context of the task, so a task's events join one trace. */
  traceparent: z.string(),
};

const eventSchema = <K extends EventKind>(kind: K) =>
  z.object({ ...envelope, kind: z.literal(kind), data: EventData[kind] });

/** Every event on `troupe.events.<pipeline>.<taskId>.<kind>`. */
export const TroupeEvent = z.discriminatedUnion('kind', [
  eventSchema('task.accepted'),
  eventSchema('task.resumed'),
  eventSchema('task.paused'),
  eventSchema('task.told'),
  eventSchema('agent.told'),
  eventSchema('step.started'),
  eventSchema('step.skipped'),
  eventSchema('route.chosen'),
  eventSchema('branches.joined'),
  eventSchema('items.joined'),
  eventSchema('agent.handoff'),
  eventSchema('llm.request'),
  eventSchema('llm.response'),
  eventSchema('llm.error'),
  eventSchema('llm.delta'),
  eventSchema('llm.retry'),
  eventSchema('llm.fallback'),
  eventSchema('context.compacted'),
  eventSchema('session.compacted'),
  eventSchema('tool.call'),
  eventSchema('tool.progress'),
  eventSchema('tool.result'),
  eventSchema('approval.requested'),
  eventSchema('approval.decided'),
  eventSchema('human.asked'),
  eventSchema('human.answered'),
  eventSchema('step.completed'),
  eventSchema('task.completed'),
  eventSchema('task.failed'),
  eventSchema('task.cancelled'),
  eventSchema('eval.scored'),
]);
export type TroupeEvent = z.infer<typeof TroupeEvent>;

/** The event of one kind. */
export type EventOf<K extends EventKind> = Extract<TroupeEvent, { kind: K }>;

/** Reported on `troupe.events._invalid` when a message fails validation and its sender asked for no reply. */
export const InvalidMessageEvent = z.object({
  id: z.string(),
  ts: z.string(),
  kind: z.literal('message.invalid'),
  /** The subject the bad message arrived on. */
  subject: z.string(),
  /** Who noticed: e.g. `coordinator`, `agent:executor`. */
  reporter: z.string(),
  reason: z.string(),
  issues: z.array(z.object({ path: z.string(), message: z.string() })),
  /** The start of the offending payload, as text. */
  payload: z.string(),
  pipeline: z.string().optional(),
  taskId: z.string().optional(),
});
export type InvalidMessageEvent = z.infer<typeof InvalidMessageEvent>;
