import {
  type EventKind,
  type EventOf,
  emptyUsage,
  type TroupeEvent,
  type UsageTotals,
} from '@troupe/protocol';
import type {
  ApprovalTrace,
  FlowNode,
  FlowPlace,
  ModelCallTrace,
  QuestionTrace,
  StepTrace,
  TaskTrace,
  ToolCallTrace,
} from './taskTrace.ts';

const ms = (from: string, to: string) => Math.max(0, Date.parse(to) - Date.parse(from));

/** Which run of a step an event is about, beyond step and round: the branches and items it is in. */
const placeKey = (within: readonly FlowPlace[] | undefined, item: number | undefined) =>
  within ? within.map((p) => `${p.step}/${p.branch ?? ''}/${p.item ?? ''}`).join('>') : `${item ?? ''}`;

const where = (within: FlowPlace[] | undefined) => (within ? { within } : {});

/** The key of a tool call within its task: a resumed run says the same call again under the same key. */
const toolKey = (data: {
  stepId: string;
  turn?: number | undefined;
  index?: number | undefined;
  callId: string;
}) => `${data.stepId}:${data.turn ?? ''}:${data.index ?? data.callId}`;

/**
 * What the fold of one task's events has built so far: the trace, and the indexes that find the part of it a later
 * event adds to (a step, a model call, a tool call, …) and that take a fact a resumed run says again once.
 */
export class TraceFold {
  readonly trace: TaskTrace;
  private readonly steps = new Map<string, StepTrace>();
  /** Each flow decision once, by its key, with its place in the flow: a resumed task may say one again. */
  private readonly decided = new Map<string, number>();
  private readonly models = new Map<string, ModelCallTrace>();
  readonly tools = new Map<string, ToolCallTrace>();
  readonly approvals = new Map<string, ApprovalTrace>();
  readonly questions = new Map<string, QuestionTrace>();
  readonly compactions = new Set<string>();
  /** Each told message's text by id, for the steps that read it; and which step read which at which turn. */
  readonly told = new Map<string, string>();
  readonly toldRead = new Set<string>();

  constructor(taskId: string, pipeline: string) {
    this.trace = {
      taskId,
      pipeline,
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
  }

  /** Folds one event of the task in; a kind the trace does not show is passed over. */
  add(event: TroupeEvent): void {
    const handle = handlers[event.kind] as ((fold: TraceFold, event: TroupeEvent) => void) | undefined;
    handle?.(this, event);
  }

  /** The trace, its totals counted. */
  finish(): TaskTrace {
    count(this.trace);
    return this.trace;
  }

  /** A step, added in flow order when first seen (by its agent's events, when its `step.started` was lost or is to come). */
  stepOf(stepId: string, agent: string): StepTrace {
    let step = this.steps.get(stepId);
    if (!step) {
      step = { stepId, step: stepId, agent, round: 1, entries: [] };
      this.steps.set(stepId, step);
      this.trace.steps.push(step);
      this.trace.flow.push({ kind: 'step', stepId });
    }
    return step;
  }

  /**
   * Adds a flow decision unless one under the same key was already added; then `replaces`, when given and true of
   * the earlier one, puts this one in its place.
   */
  decision(key: string, node: FlowNode, replaces?: (earlier: FlowNode) => boolean): void {
    const place = this.decided.get(key);
    const earlier = place === undefined ? undefined : this.trace.flow[place];
    if (place === undefined || earlier === undefined) {
      this.decided.set(key, this.trace.flow.length);
      this.trace.flow.push(node);
    } else if (replaces?.(earlier)) this.trace.flow[place] = node;
  }

  /** The model call of a step's turn, added under its step when first seen. */
  modelOf(data: { stepId: string; agent: string; turn: number }, at: string, model: string): ModelCallTrace {
    const key = `${data.stepId}:${data.turn}`;
    let call = this.models.get(key);
    if (!call) {
      call = { kind: 'model', turn: data.turn, model, at, retries: [], fallbacks: [] };
      this.models.set(key, call);
      this.stepOf(data.stepId, data.agent).entries.push(call);
    }
    return call;
  }

  /** Marks the task ended, with the task's own usage and duration (or the time since it was accepted). */
  ended(event: TroupeEvent, status: TaskTrace['status'], usage: UsageTotals, durationMs?: number): void {
    const trace = this.trace;
    trace.status = status;
    trace.endedAt = event.ts;
    Object.assign(trace.totals, usage);
    const duration = durationMs ?? (trace.startedAt ? ms(trace.startedAt, event.ts) : undefined);
    if (duration !== undefined) trace.durationMs = duration;
  }
}

type Handlers = { [K in EventKind]?: (fold: TraceFold, event: EventOf<K>) => void };

/** What each kind of event adds to the trace; the kinds not here (deltas, progress) add nothing. */
const handlers: Handlers = {
  'task.accepted': ({ trace }, event) => {
    trace.goal = event.data.goal;
    if (event.data.input) trace.input = event.data.input;
    if (event.data.inputCut) trace.inputCut = event.data.inputCut;
    if (event.data.origin) trace.origin = event.data.origin;
    if (event.data.workspace) trace.originFiles = event.data.workspace;
    trace.startedAt = event.ts;
  },
  'task.resumed': (fold, { id, ts, data: d }) => {
    // A resume after a pause is a person's act, in the flow; `resumed` counts the pick-ups after a crash.
    if (d.after !== 'pause') {
      fold.trace.resumed += 1;
      return;
    }
    fold.decision(`resumed:${id}`, {
      kind: 'resumed',
      at: ts,
      state: d.state,
      round: d.round,
      ...(d.by === undefined ? {} : { by: d.by }),
      ...(d.pausedMs === undefined ? {} : { pausedMs: d.pausedMs }),
    });
  },
  'task.paused': (fold, { id, ts, data: d }) => {
    fold.decision(`paused:${id}`, {
      kind: 'paused',
      at: ts,
      state: d.state,
      round: d.round,
      ...(d.by === undefined ? {} : { by: d.by }),
      ...(d.reason === undefined ? {} : { reason: d.reason }),
    });
  },
  'task.told': (fold, { ts, data: d }) => {
    fold.told.set(d.messageId, d.text);
    fold.decision(`told:${d.messageId}`, {
      kind: 'told',
      at: ts,
      messageId: d.messageId,
      text: d.text,
      ...(d.by === undefined ? {} : { by: d.by }),
    });
  },
  'agent.told': (fold, { ts, data: d }) => {
    // A re-run of the step reads the same messages at the same turn (its journal says so), and says so again.
    const key = `${d.stepId}:${d.turn}`;
    if (fold.toldRead.has(key)) return;
    fold.toldRead.add(key);
    fold.stepOf(d.stepId, d.agent).entries.push({
      kind: 'told',
      at: ts,
      turn: d.turn,
      messages: d.messageIds.map((id) => {
        const text = fold.told.get(id);
        return text === undefined ? { id } : { id, text };
      }),
    });
  },
  'step.started': (fold, event) => {
    const { stepId, step, agent, round, within, subTask } = event.data;
    const known = fold.stepOf(stepId, agent);
    Object.assign(known, {
      step,
      agent,
      round,
      startedAt: known.startedAt ?? event.ts,
      ...where(within),
      ...(subTask ? { subTask: { ...subTask, ...known.subTask } } : {}),
    });
  },
  'step.skipped': (fold, { ts, data: d }) => {
    fold.decision(`skipped:${d.step}:${d.round}:${placeKey(d.within, d.item)}`, {
      kind: 'skipped',
      at: ts,
      step: d.step,
      round: d.round,
      when: d.when,
      ...where(d.within),
    });
  },
  'route.chosen': (fold, { ts, data: d }) => {
    // A router asked again after a crash may pick another target, which the task went on with: the later pick stands
    // (its event has an id of its own). The same pick said again by a resumed run keeps the first's time and reason.
    const repicked = (earlier: FlowNode) => earlier.kind === 'route' && earlier.target !== d.target;
    fold.decision(
      `route:${d.step}:${d.round}:${placeKey(d.within, d.item)}`,
      {
        kind: 'route',
        at: ts,
        step: d.step,
        round: d.round,
        value: d.value,
        ...(d.case === undefined ? {} : { case: d.case }),
        target: d.target,
        ...(d.agent === undefined ? {} : { agent: d.agent }),
        ...(d.reason === undefined ? {} : { reason: d.reason }),
        ...where(d.within),
      },
      repicked,
    );
  },
  'branches.joined': (fold, { ts, data: d }) => {
    fold.decision(`branches:${d.step}:${d.round}:${placeKey(d.within, d.item)}`, {
      kind: 'branches',
      at: ts,
      step: d.step,
      round: d.round,
      join: d.join,
      branches: d.branches,
      ok: d.ok,
      ...where(d.within),
    });
  },
  'items.joined': (fold, { ts, data: d }) => {
    fold.decision(`items:${d.step}:${d.round}:${placeKey(d.within, d.item)}`, {
      kind: 'items',
      at: ts,
      step: d.step,
      round: d.round,
      items: d.items,
      completed: d.completed,
      failed: d.failed,
      stopped: d.stopped,
      ok: d.ok,
      ...where(d.within),
    });
  },
  'agent.handoff': (fold, event) => {
    const d = event.data;
    // A hand-off is told apart by its event's id, which a resumed run saying it again keeps.
    fold.decision(`handoff:${d.step}:${d.round}:${placeKey(d.within, d.item)}:${event.id}`, {
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
  },
  'step.completed': (fold, { data: d }) => {
    const step = fold.stepOf(d.stepId, d.agent);
    Object.assign(step, { step: d.step, round: d.round });
    step.outcome = {
      ok: d.ok,
      durationMs: d.durationMs,
      usage: d.usage,
      turns: d.turns,
      ...(d.verdict ? { verdict: { decision: d.verdict.decision, feedback: d.verdict.feedback } } : {}),
      ...(d.error ? { error: d.error } : {}),
      ...(d.reused ? { reused: true } : {}),
    };
  },
  'llm.request': (fold, { ts, data: d }) => {
    fold.modelOf(d, ts, `${d.provider}:${d.model}`);
  },
  'llm.response': (fold, { ts, data: d }) => {
    const call = fold.modelOf(d, ts, `${d.provider}:${d.model}`);
    // A run that resumed the step replays the reply: the call that was made stands.
    if (call.reply && !call.reply.journaled && d.journaled) return;
    call.reply = {
      model: `${d.provider}:${d.model}`,
      ...d.usage,
      costUsd: d.costUsd,
      durationMs: d.durationMs,
      finishReason: d.finishReason,
      toolCalls: d.toolCalls.length,
      journaled: d.journaled === true,
    };
  },
  'llm.error': (fold, { ts, data: d }) => {
    fold.modelOf(d, ts, `${d.provider}:${d.model}`).error = { code: d.code, message: d.message };
  },
  'llm.retry': (fold, { ts, data: d }) => {
    fold
      .modelOf(d, ts, `${d.provider}:${d.model}`)
      .retries.push({ attempt: d.attempt, code: d.code, delayMs: d.delayMs });
  },
  'llm.fallback': (fold, { ts, data: d }) => {
    fold.modelOf(d, ts, d.from).fallbacks.push({ from: d.from, to: d.to, code: d.code });
  },
  'context.compacted': (fold, { ts, data: d }) => {
    // Events from before compactions had an index are told apart by what they compacted.
    const key = `${d.stepId}:${d.index ?? `${d.before}:${d.after}:${d.estimatedTokens}`}`;
    if (fold.compactions.has(key)) return;
    fold.compactions.add(key);
    fold.stepOf(d.stepId, d.agent).entries.push({
      kind: 'compaction',
      at: ts,
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
  },
  'tool.call': (fold, { ts, data: d }) => {
    if (fold.tools.has(toolKey(d))) return;
    const call: ToolCallTrace = {
      kind: 'tool',
      ...(d.turn === undefined ? {} : { turn: d.turn }),
      callId: d.callId,
      tool: d.tool,
      arguments: d.arguments,
      at: ts,
    };
    fold.tools.set(toolKey(d), call);
    fold.stepOf(d.stepId, d.agent).entries.push(call);
  },
  'tool.result': (fold, { ts, data: d }) => {
    let call = fold.tools.get(toolKey(d));
    if (!call) {
      // Its call event was lost: the result still shows, without the arguments.
      call = { kind: 'tool', callId: d.callId, tool: d.tool, arguments: '', at: ts };
      fold.tools.set(toolKey(d), call);
      fold.stepOf(d.stepId, d.agent).entries.push(call);
    }
    // As with a model's reply: a resumed run's journaled result does not replace the one the tool gave.
    if (call.result && !call.result.journaled && d.journaled) return;
    call.result = {
      ok: d.ok,
      decision: d.decision,
      output: d.output,
      ...(d.outputRef ? { outputRef: d.outputRef } : {}),
      durationMs: d.durationMs,
      ...(d.error ? { error: d.error } : {}),
      journaled: d.journaled === true,
    };
  },
  'approval.requested': (fold, { ts, data: d }) => {
    if (fold.approvals.has(d.approvalId)) return;
    const approval: ApprovalTrace = {
      kind: 'approval',
      approvalId: d.approvalId,
      tool: d.tool,
      callId: d.callId,
      reason: d.reason,
      at: ts,
    };
    fold.approvals.set(d.approvalId, approval);
    fold.stepOf(d.stepId, d.agent).entries.push(approval);
  },
  'approval.decided': (fold, { ts, data: d }) => {
    const approval = fold.approvals.get(d.approvalId);
    if (!approval) return;
    approval.decided = {
      decision: d.decision,
      ...(d.by === undefined ? {} : { by: d.by }),
      ...(d.reason === undefined ? {} : { reason: d.reason }),
      expired: d.expired === true,
      waitedMs: ms(approval.at, ts),
    };
  },
  'human.asked': (fold, { ts, data: d }) => {
    if (fold.questions.has(d.questionId)) return;
    const question: QuestionTrace = {
      kind: 'question',
      questionId: d.questionId,
      question: d.question,
      at: ts,
    };
    fold.questions.set(d.questionId, question);
    fold.stepOf(d.stepId, d.agent).entries.push(question);
  },
  'human.answered': (fold, { ts, data: d }) => {
    const question = fold.questions.get(d.questionId);
    if (!question) return;
    question.answered = {
      answer: d.answer,
      ...(d.by === undefined ? {} : { by: d.by }),
      waitedMs: ms(question.at, ts),
    };
  },
  'task.completed': (fold, event) => {
    fold.ended(event, 'completed', event.data.usage, event.data.durationMs);
    fold.trace.output = event.data.output;
    if (event.data.outputRef) fold.trace.outputRef = event.data.outputRef;
  },
  'task.failed': (fold, event) => {
    fold.ended(event, 'failed', event.data.usage, event.data.durationMs);
    fold.trace.failure = {
      reason: event.data.reason,
      message: event.data.message,
      ...(event.data.step === undefined ? {} : { step: event.data.step }),
    };
  },
  'task.cancelled': (fold, event) => {
    fold.ended(event, 'cancelled', event.data.usage);
    if (event.data.reason !== undefined) fold.trace.cancelReason = event.data.reason;
  },
};

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
      else if (entry.kind !== 'told') {
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
          const writes = (totals.cacheWriteTokens ?? 0) + (entry.reply.cacheWriteTokens ?? 0);
          if (writes > 0) totals.cacheWriteTokens = writes;
          totals.costUsd += entry.reply.costUsd;
          totals.modelCalls += 1;
        }
      }
    }
  }
}
