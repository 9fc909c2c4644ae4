import {
  fillInput,
  type InputCut,
  type TaskOriginRef,
  type TroupeEvent,
  type UsageTotals,
  type ValueRef,
} from '@troupe/protocol';
import { TraceFold } from './taskTraceFold.ts';

/**
 * A task as a tree, built from its events (`troupe trace`): its steps in order, and in each step what the agent did
 * — model calls with their retries and fallbacks, tool calls, people asked — with totals. Built from the `EVENTS`
 * stream alone, so it works for a finished task and for one still running (whatever has happened so far).
 */
export interface TaskTrace {
  taskId: string;
  pipeline: string;
  /** The hash of the pipeline version the task runs on, from its record (the events do not say). */
  version?: string;
  status: 'running' | 'completed' | 'failed' | 'cancelled';
  goal?: string;
  /** The ended task this one restarts or forks, from its `task.accepted`. */
  origin?: TaskOriginRef;
  /** A restart's or fork's workspace files from its origin: how many it carried, or why none (`note`). */
  originFiles?: { files: number; bytes: number; note?: string | undefined };
  /** The task's input; with `inputCut`, some keys hold only previews unless the trace was read whole. */
  input?: Record<string, unknown>;
  inputCut?: InputCut;
  startedAt?: string;
  endedAt?: string;
  durationMs?: number;
  /** Times the task was picked up again after a crash or a hand-back. */
  resumed: number;
  failure?: { reason: string; message: string; step?: string };
  /** Why it was cancelled, when the person said. */
  cancelReason?: string;
  /** The task's output; only its preview when `outputRef` is set and the trace was not read whole ({@link wholeTrace}). */
  output?: string;
  outputRef?: ValueRef;
  steps: StepTrace[];
  /**
   * The flow's shape, in the order it happened: each step (by `stepId`, as in `steps`) as it first appears, with the
   * route choices, skipped steps, joins of parallel and foreach steps, and hand-offs between them. Each names where in
   * the flow it is (`within`), so a reader can nest branches and items.
   */
  flow: FlowNode[];
  totals: TraceTotals;
}

/** A parallel step and its branch, or a foreach step and the item (its place in the list and its start, as JSON). */
export interface FlowPlace {
  step: string;
  branch?: string | undefined;
  item?: number | undefined;
  value?: string | undefined;
}

export type FlowNode =
  | StepNode
  | RouteNode
  | SkipNode
  | BranchesJoinNode
  | ItemsJoinNode
  | HandoffNode
  | PausedNode
  | ResumedNode
  | ToldNode;

/** A step, its details in `steps` under the same id. */
export interface StepNode {
  kind: 'step';
  stepId: string;
}

/** Where a route sent the flow, and why: the value that matched a case, or a router agent's reason. */
export interface RouteNode {
  kind: 'route';
  at: string;
  step: string;
  round: number;
  value: string;
  /** Absent when the route's default was taken. */
  case?: string;
  target: string;
  agent?: string;
  reason?: string;
  within?: FlowPlace[];
}

/** A step whose `when` was false. */
export interface SkipNode {
  kind: 'skipped';
  at: string;
  step: string;
  round: number;
  when: string;
  within?: FlowPlace[];
}

/** A parallel step's join: how each branch ended. */
export interface BranchesJoinNode {
  kind: 'branches';
  at: string;
  step: string;
  round: number;
  join: 'all' | 'any' | 'first';
  branches: Record<string, { status: 'completed' | 'failed' | 'stopped'; message?: string | undefined }>;
  ok: boolean;
  within?: FlowPlace[];
}

/** A foreach step's join: how many items there were and how they ended. */
export interface ItemsJoinNode {
  kind: 'items';
  at: string;
  step: string;
  round: number;
  items: number;
  completed: number;
  failed: { index: number; message: string }[];
  stopped: number;
  ok: boolean;
  within?: FlowPlace[];
}

/** The work handed on to the agent of `step`: from an agent, the task, or the join of a parallel or foreach step. */
export interface HandoffNode {
  kind: 'handoff';
  at: string;
  from: string;
  to: string;
  step: string;
  round: number;
  reason: string;
  /** The parallel or foreach step whose join handed the work on. */
  join?: string;
  within?: FlowPlace[];
}

/** A person held the task (`troupe pause`), where its workflow stood. */
export interface PausedNode {
  kind: 'paused';
  at: string;
  state: string;
  round: number;
  by?: string;
  reason?: string;
}

/** A person let the held task go on (`troupe resume`), after `pausedMs` held; a resume after a crash is not one. */
export interface ResumedNode {
  kind: 'resumed';
  at: string;
  state: string;
  round: number;
  by?: string;
  pausedMs?: number;
}

/** A person's message for the task (`troupe tell`), as recorded; the steps whose agents read it list it as `told`. */
export interface ToldNode {
  kind: 'told';
  at: string;
  messageId: string;
  text: string;
  by?: string;
}

export interface TraceTotals extends UsageTotals {
  toolCalls: number;
  approvals: number;
  questions: number;
  retries: number;
  fallbacks: number;
  errors: number;
}

export interface StepTrace {
  stepId: string;
  step: string;
  agent: string;
  round: number;
  /** Where in the flow the step ran: the parallel branches and foreach items holding it, outermost first. */
  within?: FlowPlace[];
  /** A `pipeline` step's sub-task; its trace when it was read too (see {@link withSubTasks}). */
  subTask?: { taskId: string; pipeline: string; trace?: TaskTrace };
  startedAt?: string;
  /** Absent while the step runs. */
  outcome?: {
    ok: boolean;
    durationMs: number;
    usage: UsageTotals;
    turns: number;
    verdict?: { decision: string; feedback: string };
    error?: { code: string; message: string };
    /** The output is the origin task's: the step did not run again (a restart or fork). */
    reused?: true;
  };
  entries: TraceEntry[];
}

export type TraceEntry =
  | ModelCallTrace
  | ToolCallTrace
  | ApprovalTrace
  | QuestionTrace
  | CompactionTrace
  | ToldTrace;

/** What a model call that answered spent, and which model answered. */
export interface ModelSpend {
  model: string;
  /** The whole prompt, cache reads and writes included. */
  inputTokens: number;
  outputTokens: number;
  /** Input tokens read from the prompt cache. */
  cachedTokens: number;
  /** Input tokens written to the prompt cache; absent when none were (or the provider does not say). */
  cacheWriteTokens?: number | undefined;
  /** Of the writes, those with the 1-hour lifetime. */
  cacheWrite1hTokens?: number | undefined;
  costUsd: number;
  durationMs: number;
  /** Replayed from the step's journal: the model was not asked again. */
  journaled: boolean;
}

export interface ModelCallTrace {
  kind: 'model';
  turn: number;
  /** `provider:model` asked; the one that answered when a fallback did. */
  model: string;
  at: string;
  reply?: ModelSpend & { finishReason: string; toolCalls: number };
  error?: { code: string; message: string };
  retries: { attempt: number; code: string; delayMs: number }[];
  fallbacks: { from: string; to: string; code: string }[];
}

export interface ToolCallTrace {
  kind: 'tool';
  turn?: number;
  callId: string;
  tool: string;
  arguments: string;
  at: string;
  result?: {
    ok: boolean;
    decision: string;
    /** What the event kept: the start of a long output, whole when read with {@link wholeTrace} and `outputRef` is set. */
    output: string;
    outputRef?: ValueRef;
    durationMs: number;
    error?: { code: string; message: string };
    journaled: boolean;
  };
}

export interface ApprovalTrace {
  kind: 'approval';
  approvalId: string;
  tool: string;
  callId: string;
  reason: string;
  at: string;
  decided?: { decision: 'allow' | 'deny'; by?: string; reason?: string; expired: boolean; waitedMs: number };
}

export interface QuestionTrace {
  kind: 'question';
  questionId: string;
  question: string;
  at: string;
  answered?: { answer: string; by?: string; waitedMs: number };
}

export interface CompactionTrace {
  kind: 'compaction';
  at: string;
  before: number;
  after: number;
  estimatedTokens: number;
  /** The model call that wrote the summary, where the event says (events from before it was added do not). */
  reply?: ModelSpend;
}

/** The agent read told messages into its conversation before model call `turn` (their text, where the trace has it). */
export interface ToldTrace {
  kind: 'told';
  at: string;
  turn: number;
  messages: { id: string; text?: string }[];
}

/**
 * The trace with each value its events name by reference read back whole (the task's input and output, large tool
 * results).
 * One that cannot be read keeps its preview, which says where the whole was, and its reference.
 */
export async function wholeTrace(
  trace: TaskTrace,
  read: (ref: ValueRef) => Promise<string>,
): Promise<TaskTrace> {
  const whole = async (preview: string, ref: ValueRef | undefined) =>
    ref ? read(ref).catch(() => preview) : preview;
  const steps = await Promise.all(
    trace.steps.map(async (step) => ({
      ...step,
      ...(step.subTask?.trace
        ? { subTask: { ...step.subTask, trace: await wholeTrace(step.subTask.trace, read) } }
        : {}),
      entries: await Promise.all(
        step.entries.map(async (entry) =>
          entry.kind === 'tool' && entry.result?.outputRef
            ? {
                ...entry,
                result: { ...entry.result, output: await whole(entry.result.output, entry.result.outputRef) },
              }
            : entry,
        ),
      ),
    })),
  );
  const { inputCut, ...rest } = trace;
  const input = inputCut
    ? await read(inputCut.ref).then(
        (stored) => fillInput(trace.input, inputCut, stored),
        () => undefined,
      )
    : undefined;
  return {
    ...rest,
    // Read whole, the input is cut no more; else it keeps its previews, and the cut says where the whole was.
    ...(input ? { input } : inputCut ? { inputCut } : {}),
    ...(trace.output === undefined ? {} : { output: await whole(trace.output, trace.outputRef) }),
    steps,
  };
}

/** Builds the tree of one task from its events, in the order they were stored: a fold of them into a {@link TraceFold}. */
export function buildTaskTrace(taskId: string, events: readonly TroupeEvent[]): TaskTrace {
  const fold = new TraceFold(taskId, events[0]?.pipeline ?? '');
  for (const event of events) if (event.taskId === taskId) fold.add(event);
  return fold.finish();
}
