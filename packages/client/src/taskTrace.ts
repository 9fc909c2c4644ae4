import {
  emptyUsage,
  fillInput,
  type InputCut,
  type TroupeEvent,
  type UsageTotals,
  type ValueRef,
} from '@troupe/protocol';

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

export type FlowNode = StepNode | RouteNode | SkipNode | BranchesJoinNode | ItemsJoinNode | HandoffNode;

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
  };
  entries: TraceEntry[];
}

export type TraceEntry = ModelCallTrace | ToolCallTrace | ApprovalTrace | QuestionTrace | CompactionTrace;

/** What a model call that answered spent, and which model answered. */
export interface ModelSpend {
  model: string;
  inputTokens: number;
  outputTokens: number;
  cachedTokens: number;
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

const ms = (from: string, to: string) => Math.max(0, Date.parse(to) - Date.parse(from));

/** Which run of a step an event is about, beyond step and round: the branches and items it is in. */
const placeKey = (within: readonly FlowPlace[] | undefined, item: number | undefined) =>
  within ? within.map((p) => `${p.step}/${p.branch ?? ''}/${p.item ?? ''}`).join('>') : `${item ?? ''}`;

/** Builds the tree of one task from its events, in the order they were stored. */
export function buildTaskTrace(taskId: string, events: readonly TroupeEvent[]): TaskTrace {
  const trace: TaskTrace = {
    taskId,
    pipeline: events[0]?.pipeline ?? '',
    status: 'running',
    resumed: 0,
    steps: [],
    flow: [],
    totals: {
      ...emptyUsage(),
      toolCalls: 0,
      approvals: 0,
      questions: 0,
      retries: 0,
      fallbacks: 0,
      errors: 0,
    },
  };
  const steps = new Map<string, StepTrace>();
  /** A step seen only through its agent's events (its `step.started` was lost or is still to come). */
  const stepOf = (stepId: string, agent: string): StepTrace => {
    let step = steps.get(stepId);
    if (!step) {
      step = { stepId, step: stepId, agent, round: 1, entries: [] };
      steps.set(stepId, step);
      trace.steps.push(step);
      trace.flow.push({ kind: 'step', stepId });
    }
    return step;
  };
  /** Each flow decision once: a resumed task may say one again. */
  const decided = new Set<string>();
  const decision = (key: string, node: FlowNode) => {
    if (decided.has(key)) return;
    decided.add(key);
    trace.flow.push(node);
  };
  const where = (within: FlowPlace[] | undefined) => (within ? { within } : {});
  const models = new Map<string, ModelCallTrace>();
  const modelOf = (data: { stepId: string; agent: string; turn: number }, at: string, model: string) => {
    const key = `${data.stepId}:${data.turn}`;
    let call = models.get(key);
    if (!call) {
      call = { kind: 'model', turn: data.turn, model, at, retries: [], fallbacks: [] };
      models.set(key, call);
      stepOf(data.stepId, data.agent).entries.push(call);
    }
    return call;
  };
  const tools = new Map<string, ToolCallTrace>();
  const toolKey = (data: {
    stepId: string;
    turn?: number | undefined;
    index?: number | undefined;
    callId: string;
  }) => `${data.stepId}:${data.turn ?? ''}:${data.index ?? data.callId}`;
  const approvals = new Map<string, ApprovalTrace>();
  const questions = new Map<string, QuestionTrace>();
  const compactions = new Set<string>();

  for (const event of events) {
    if (event.taskId !== taskId) continue;
    switch (event.kind) {
      case 'task.accepted':
        trace.goal = event.data.goal;
        if (event.data.input) trace.input = event.data.input;
        if (event.data.inputCut) trace.inputCut = event.data.inputCut;
        trace.startedAt = event.ts;
        break;
      case 'task.resumed':
        trace.resumed += 1;
        break;
      case 'step.started': {
        const { stepId, step, agent, round, within, subTask } = event.data;
        const known = stepOf(stepId, agent);
        Object.assign(known, {
          step,
          agent,
          round,
          startedAt: known.startedAt ?? event.ts,
          ...where(within),
          ...(subTask ? { subTask: { ...subTask, ...known.subTask } } : {}),
        });
        break;
      }
      case 'step.skipped': {
        const d = event.data;
        decision(`skipped:${d.step}:${d.round}:${placeKey(d.within, d.item)}`, {
          kind: 'skipped',
          at: event.ts,
          step: d.step,
          round: d.round,
          when: d.when,
          ...where(d.within),
        });
        break;
      }
      case 'route.chosen': {
        const d = event.data;
        decision(`route:${d.step}:${d.round}:${placeKey(d.within, d.item)}`, {
          kind: 'route',
          at: event.ts,
          step: d.step,
          round: d.round,
          value: d.value,
          ...(d.case === undefined ? {} : { case: d.case }),
          target: d.target,
          ...(d.agent === undefined ? {} : { agent: d.agent }),
          ...(d.reason === undefined ? {} : { reason: d.reason }),
          ...where(d.within),
        });
        break;
      }
      case 'branches.joined': {
        const d = event.data;
        decision(`branches:${d.step}:${d.round}:${placeKey(d.within, d.item)}`, {
          kind: 'branches',
          at: event.ts,
          step: d.step,
          round: d.round,
          join: d.join,
          branches: d.branches,
          ok: d.ok,
          ...where(d.within),
        });
        break;
      }
      case 'items.joined': {
        const d = event.data;
        decision(`items:${d.step}:${d.round}:${placeKey(d.within, d.item)}`, {
          kind: 'items',
          at: event.ts,
          step: d.step,
          round: d.round,
          items: d.items,
          completed: d.completed,
          failed: d.failed,
          stopped: d.stopped,
          ok: d.ok,
          ...where(d.within),
        });
        break;
      }
      case 'agent.handoff': {
        const d = event.data;
        decision(`handoff:${d.step}:${d.round}:${placeKey(d.within, d.item)}:${event.id}`, {
          kind: 'handoff',
          at: event.ts,
          from: event.from ?? '',
          to: event.to ?? '',
          step: d.step,
          round: d.round,
          reason: d.reason,
          ...(d.join === undefined ? {} : { join: d.join }),
          ...where(d.within),
        });
        break;
      }
      case 'step.completed': {
        const d = event.data;
        const step = stepOf(d.stepId, d.agent);
        Object.assign(step, { step: d.step, round: d.round });
        step.outcome = {
          ok: d.ok,
          durationMs: d.durationMs,
          usage: d.usage,
          turns: d.turns,
          ...(d.verdict ? { verdict: { decision: d.verdict.decision, feedback: d.verdict.feedback } } : {}),
          ...(d.error ? { error: d.error } : {}),
        };
        break;
      }
      case 'llm.request':
        modelOf(event.data, event.ts, `${event.data.provider}:${event.data.model}`);
        break;
      case 'llm.response': {
        const d = event.data;
        const call = modelOf(d, event.ts, `${d.provider}:${d.model}`);
        // A run that resumed the step replays the reply: the call that was made stands.
        if (call.reply && !call.reply.journaled && d.journaled) break;
        call.reply = {
          model: `${d.provider}:${d.model}`,
          ...d.usage,
          costUsd: d.costUsd,
          durationMs: d.durationMs,
          finishReason: d.finishReason,
          toolCalls: d.toolCalls.length,
          journaled: d.journaled === true,
        };
        break;
      }
      case 'llm.error':
        modelOf(event.data, event.ts, `${event.data.provider}:${event.data.model}`).error = {
          code: event.data.code,
          message: event.data.message,
        };
        break;
      case 'llm.retry': {
        const d = event.data;
        modelOf(d, event.ts, `${d.provider}:${d.model}`).retries.push({
          attempt: d.attempt,
          code: d.code,
          delayMs: d.delayMs,
        });
        break;
      }
      case 'llm.fallback': {
        const d = event.data;
        modelOf(d, event.ts, d.from).fallbacks.push({ from: d.from, to: d.to, code: d.code });
        break;
      }
      case 'context.compacted': {
        const d = event.data;
        const key = `${d.stepId}:${d.index ?? `${d.before}:${d.after}:${d.estimatedTokens}`}`;
        if (compactions.has(key)) break;
        compactions.add(key);
        stepOf(d.stepId, d.agent).entries.push({
          kind: 'compaction',
          at: event.ts,
          before: d.before,
          after: d.after,
          estimatedTokens: d.estimatedTokens,
          ...(d.provider && d.model && d.usage
            ? {
                reply: {
                  model: `${d.provider}:${d.model}`,
                  ...d.usage,
                  costUsd: d.costUsd ?? 0,
                  durationMs: d.durationMs ?? 0,
                  journaled: d.journaled === true,
                },
              }
            : {}),
        });
        break;
      }
      case 'tool.call': {
        const d = event.data;
        if (tools.has(toolKey(d))) break;
        const call: ToolCallTrace = {
          kind: 'tool',
          ...(d.turn === undefined ? {} : { turn: d.turn }),
          callId: d.callId,
          tool: d.tool,
          arguments: d.arguments,
          at: event.ts,
        };
        tools.set(toolKey(d), call);
        stepOf(d.stepId, d.agent).entries.push(call);
        break;
      }
      case 'tool.result': {
        const d = event.data;
        let call = tools.get(toolKey(d));
        if (!call) {
          call = { kind: 'tool', callId: d.callId, tool: d.tool, arguments: '', at: event.ts };
          tools.set(toolKey(d), call);
          stepOf(d.stepId, d.agent).entries.push(call);
        }
        if (call.result && !call.result.journaled && d.journaled) break;
        call.result = {
          ok: d.ok,
          decision: d.decision,
          output: d.output,
          ...(d.outputRef ? { outputRef: d.outputRef } : {}),
          durationMs: d.durationMs,
          ...(d.error ? { error: d.error } : {}),
          journaled: d.journaled === true,
        };
        break;
      }
      case 'approval.requested': {
        const d = event.data;
        if (approvals.has(d.approvalId)) break;
        const approval: ApprovalTrace = {
          kind: 'approval',
          approvalId: d.approvalId,
          tool: d.tool,
          callId: d.callId,
          reason: d.reason,
          at: event.ts,
        };
        approvals.set(d.approvalId, approval);
        stepOf(d.stepId, d.agent).entries.push(approval);
        break;
      }
      case 'approval.decided': {
        const d = event.data;
        const approval = approvals.get(d.approvalId);
        if (!approval) break;
        approval.decided = {
          decision: d.decision,
          ...(d.by === undefined ? {} : { by: d.by }),
          ...(d.reason === undefined ? {} : { reason: d.reason }),
          expired: d.expired === true,
          waitedMs: ms(approval.at, event.ts),
        };
        break;
      }
      case 'human.asked': {
        const d = event.data;
        if (questions.has(d.questionId)) break;
        const question: QuestionTrace = {
          kind: 'question',
          questionId: d.questionId,
          question: d.question,
          at: event.ts,
        };
        questions.set(d.questionId, question);
        stepOf(d.stepId, d.agent).entries.push(question);
        break;
      }
      case 'human.answered': {
        const question = questions.get(event.data.questionId);
        if (!question) break;
        question.answered = {
          answer: event.data.answer,
          ...(event.data.by === undefined ? {} : { by: event.data.by }),
          waitedMs: ms(question.at, event.ts),
        };
        break;
      }
      case 'task.completed':
        ended(trace, event, 'completed', event.data.usage, event.data.durationMs);
        trace.output = event.data.output;
        if (event.data.outputRef) trace.outputRef = event.data.outputRef;
        break;
      case 'task.failed':
        ended(trace, event, 'failed', event.data.usage, event.data.durationMs);
        trace.failure = {
          reason: event.data.reason,
          message: event.data.message,
          ...(event.data.step === undefined ? {} : { step: event.data.step }),
        };
        break;
      case 'task.cancelled':
        ended(trace, event, 'cancelled', event.data.usage);
        if (event.data.reason !== undefined) trace.cancelReason = event.data.reason;
        break;
      default:
        break;
    }
  }
  count(trace);
  return trace;
}

function ended(
  trace: TaskTrace,
  event: TroupeEvent,
  status: TaskTrace['status'],
  usage: UsageTotals,
  durationMs?: number,
): void {
  trace.status = status;
  trace.endedAt = event.ts;
  Object.assign(trace.totals, usage);
  const duration = durationMs ?? (trace.startedAt ? ms(trace.startedAt, event.ts) : undefined);
  if (duration !== undefined) trace.durationMs = duration;
}

/** The counts of the totals; usage too while the task runs (its final event has the task's own sums). */
function count(trace: TaskTrace): void {
  const totals = trace.totals;
  for (const step of trace.steps) {
    if (step.outcome && !step.outcome.ok) totals.errors += 1;
    for (const entry of step.entries) {
      if (entry.kind === 'tool') {
        totals.toolCalls += 1;
        if (entry.result && !entry.result.ok) totals.errors += 1;
      } else if (entry.kind === 'approval') totals.approvals += 1;
      else if (entry.kind === 'question') totals.questions += 1;
      else {
        if (entry.kind === 'model') {
          totals.retries += entry.retries.length;
          totals.fallbacks += entry.fallbacks.length;
          if (entry.error) totals.errors += 1;
        }
        // A model call, or the summary a model wrote.
        if (trace.status === 'running' && entry.reply && !entry.reply.journaled) {
          totals.inputTokens += entry.reply.inputTokens;
          totals.outputTokens += entry.reply.outputTokens;
          totals.cachedTokens += entry.reply.cachedTokens;
          totals.costUsd += entry.reply.costUsd;
          totals.modelCalls += 1;
        }
      }
    }
  }
}
