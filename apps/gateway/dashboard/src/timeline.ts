import { html } from 'htm/preact';
import { cost, count, duration, tokens } from './format.ts';
import {
  isSteering,
  type SteeringNode,
  steeringText,
  type ToldEntry,
  toldEntryText,
} from './steeringMarks.ts';

/** The trace of a task, as `GET /v1/tasks/{id}/trace` gives it (the shape `troupe trace --json` prints). */
export interface Trace {
  taskId: string;
  pipeline: string;
  goal?: string;
  status: string;
  durationMs?: number;
  /** Why it failed; `step` names the step that failed, where one did. */
  failure?: { reason: string; message: string; step?: string };
  output?: unknown;
  /** The task's input, whole unless `inputCut` says it could not be read back. */
  input?: Record<string, unknown>;
  inputCut?: unknown;
  totals: {
    inputTokens: number;
    outputTokens: number;
    cachedTokens: number;
    cacheWriteTokens?: number;
    costUsd: number;
    modelCalls: number;
    toolCalls: number;
    approvals: number;
    retries: number;
    errors: number;
  };
  steps: StepTrace[];
  /** The flow's shape, in order (absent from a gateway older than it). */
  flow?: FlowNode[];
}

/** Where a step ran: a parallel step and its branch, or a foreach step and the item. */
interface FlowPlace {
  step: string;
  branch?: string;
  item?: number;
  value?: string;
}

type FlowNode =
  | { kind: 'step'; stepId: string }
  | SteeringNode
  | {
      kind: 'route';
      step: string;
      value: string;
      case?: string;
      target: string;
      agent?: string;
      reason?: string;
      within?: FlowPlace[];
    }
  | { kind: 'skipped'; step: string; when: string; within?: FlowPlace[] }
  | { kind: 'handoff'; step: string; to: string; join?: string; within?: FlowPlace[] }
  | {
      kind: 'branches';
      step: string;
      join: string;
      branches: Record<string, { status: string; message?: string }>;
      ok: boolean;
      within?: FlowPlace[];
    }
  | {
      kind: 'items';
      step: string;
      items: number;
      completed: number;
      failed: { index: number; message: string }[];
      stopped: number;
      ok: boolean;
      within?: FlowPlace[];
    };
type Mark = Extract<FlowNode, { kind: 'route' | 'skipped' | 'handoff' }> | SteeringNode;
type Join = Extract<FlowNode, { kind: 'branches' | 'items' }>;

export interface StepTrace {
  stepId: string;
  step: string;
  agent: string;
  round: number;
  within?: FlowPlace[];
  subTask?: { taskId: string; pipeline: string; trace?: Trace };
  outcome?: {
    ok: boolean;
    durationMs: number;
    usage: {
      inputTokens: number;
      outputTokens: number;
      cachedTokens: number;
      cacheWriteTokens?: number;
      costUsd: number;
    };
    verdict?: { decision: string; feedback?: string };
    error?: { code: string; message: string };
    /** The output is the original's (a restart or fork): the step did not run again. */
    reused?: true;
  };
  entries: Entry[];
}

// The entries as the trace builds them; only what the view shows is named.
type Entry =
  | {
      kind: 'model';
      turn: number;
      model: string;
      reply?: {
        model: string;
        inputTokens: number;
        outputTokens: number;
        cachedTokens: number;
        cacheWriteTokens?: number;
        costUsd: number;
        durationMs: number;
        finishReason: string;
        journaled: boolean;
      };
      error?: { code: string; message: string };
      retries: { attempt: number; code: string; delayMs: number }[];
      fallbacks: { from: string; to: string; code: string }[];
    }
  | {
      kind: 'tool';
      tool: string;
      arguments: string;
      result?: {
        ok: boolean;
        decision: string;
        output: string;
        durationMs: number;
        error?: { code: string; message: string };
      };
    }
  | {
      kind: 'approval';
      approvalId: string;
      tool: string;
      decided?: { decision: string; by?: string; reason?: string; waitedMs: number };
    }
  | { kind: 'question'; questionId: string; question: string; answered?: { answer: string; by?: string } }
  | { kind: 'compaction'; before: number; after: number }
  | ToldEntry;

/**
 * A task's timeline in the flow's shape: each step with its outcome, and under it each model and tool call, opened
 * on a click; route choices and skipped steps where they happened; a parallel step's branches and a foreach step's
 * items nested under it with how its join ended; a sub-pipeline's task under its step.
 */
export function Timeline(props: { trace: Trace; stepTools?: StepTools | undefined; paused?: boolean }) {
  const { trace } = props;
  const placed = (p: Placed) => placedItem(p, props.stepTools);
  // A held task is running as far as its events go; its view says a person holds it.
  const status = props.paused && trace.status === 'running' ? 'paused' : trace.status;
  return html`<div class="timeline" data-testid="timeline">
    <h3>${trace.taskId} <span class=${`status ${status}`}>${status}</span></h3>
    ${trace.goal ? html`<p class="goal">${trace.goal}</p>` : null}
    <ol class="steps">
      ${outline(trace).map(placed)}
    </ol>
    ${trace.failure ? html`<p class="bad">failed: ${trace.failure.reason}: ${trace.failure.message}</p>` : null}
    <p class="totals" data-testid="totals">${totalsText(trace)}</p>
  </div>`;
}

/** The task's totals in one line; one string, since htm drops the spaces that end a line of a template. */
function totalsText(trace: Trace): string {
  const t = trace.totals;
  return [
    count(t.modelCalls, 'model call'),
    tokens(t),
    cost(t.costUsd),
    count(t.toolCalls, 'tool call'),
    ...(t.approvals ? [count(t.approvals, 'approval')] : []),
    ...(trace.durationMs === undefined ? [] : [duration(trace.durationMs)]),
  ].join(' · ');
}

/** What the page adds under a step of the task's own timeline (a fork from it); a sub-task's steps get none. */
export type StepTools = (step: StepTrace) => unknown;

/** A parallel or foreach step as the trace met it: its branches or items, each a lane of what ran in it. */
interface Group {
  kind: 'group';
  step: string;
  parallel: boolean;
  lanes: { key: string; value?: string | undefined; placed: Placed[] }[];
  joined?: Join;
}
type Placed = Group | { kind: 'step'; step: StepTrace } | { kind: 'mark'; node: Mark };

/** The flow as a tree (as `troupe trace` draws it); a trace without `flow` is its steps in order. */
function outline(trace: Trace): Placed[] {
  const steps = new Map(trace.steps.map((s) => [s.stepId, s]));
  const flow: FlowNode[] = trace.flow ?? trace.steps.map((s) => ({ kind: 'step', stepId: s.stepId }));
  const root: Placed[] = [];
  const groupIn = (list: Placed[], step: string, parallel: boolean): Group => {
    const open = list.findLast((p): p is Group => p.kind === 'group' && p.step === step && !p.joined);
    if (open) return open;
    const group: Group = { kind: 'group', step, parallel, lanes: [] };
    list.push(group);
    return group;
  };
  const listAt = (within: FlowPlace[] | undefined): Placed[] => {
    let list = root;
    for (const place of within ?? []) {
      const parallel = place.branch !== undefined;
      const group = groupIn(list, place.step, parallel);
      const key = parallel ? (place.branch as string) : `${place.item ?? '?'}`;
      let lane = group.lanes.find((l) => l.key === key);
      if (!lane) {
        lane = { key, value: place.value, placed: [] };
        group.lanes.push(lane);
      }
      lane.value ??= place.value;
      list = lane.placed;
    }
    return list;
  };
  for (const node of flow) {
    if (node.kind === 'step') {
      const step = steps.get(node.stepId);
      if (step) listAt(step.within).push({ kind: 'step', step });
    } else if (node.kind === 'branches' || node.kind === 'items') {
      groupIn(listAt(node.within), node.step, node.kind === 'branches').joined = node;
    } else if (isSteering(node)) {
      // A hold or a told message is the task's, wherever its flow stood: at the top, in the order it came.
      root.push({ kind: 'mark', node });
    } else if (node.kind !== 'handoff' || node.join !== undefined) {
      // Only a hand-off from a join says more than the order of the steps does.
      listAt(node.within).push({ kind: 'mark', node });
    }
  }
  return root;
}

function placedItem(placed: Placed, tools?: StepTools): unknown {
  if (placed.kind === 'step') return stepItem(placed.step, tools);
  if (placed.kind === 'mark') return markItem(placed.node);
  return groupItem(placed, tools);
}

function markItem(node: Mark) {
  if (isSteering(node)) {
    return html`<li class=${`flow-mark steer ${node.kind}`} data-testid="timeline-steer" data-kind=${node.kind}>${steeringText(node)}</li>`;
  }
  return html`<li class="flow-mark" data-testid="timeline-mark">${markText(node)}</li>`;
}

function stepItem(s: StepTrace, tools?: StepTools) {
  const sub = s.subTask;
  return html`<li class="step" data-testid="timeline-step" data-step=${s.step} data-verdict=${s.outcome?.verdict?.decision ?? ''}>
    <div class="step-head">
      <strong>${s.step}</strong>${` · ${s.agent} · round ${s.round} · `}${stepOutcome(s)}
    </div>
    ${s.outcome?.verdict?.feedback ? html`<p class=${`feedback ${s.outcome.verdict.decision}`}>${s.outcome.verdict.feedback}</p>` : null}
    ${s.outcome?.error ? html`<p class="bad">${s.outcome.error.code}: ${s.outcome.error.message}</p>` : null}
    <ul class="entries">
      ${s.entries.map((e) => html`<li>${entry(e)}</li>`)}
    </ul>
    ${tools ? tools(s) : null}
    ${
      sub
        ? html`<div class="subtask" data-testid="timeline-subtask">
            sub-task ${sub.taskId} · ${sub.pipeline} · ${sub.trace ? html`<span class=${`status ${sub.trace.status}`}>${sub.trace.status}</span>` : 'its events are not stored'}
            ${sub.trace ? html`<ol class="steps">${outline(sub.trace).map((p) => placedItem(p))}</ol>` : null}
          </div>`
        : null
    }
  </li>`;
}

function groupItem(group: Group, tools?: StepTools) {
  const joined = group.joined;
  if (joined?.kind === 'branches') {
    for (const name of Object.keys(joined.branches)) {
      if (!group.lanes.some((l) => l.key === name)) group.lanes.push({ key: name, placed: [] });
    }
  }
  if (joined?.kind === 'items') {
    for (const { index } of joined.failed) {
      if (!group.lanes.some((l) => l.key === `${index}`)) group.lanes.push({ key: `${index}`, placed: [] });
    }
    group.lanes.sort((a, b) => Number(a.key) - Number(b.key));
  }
  const state = !joined
    ? html`<span class="running">running</span>`
    : html`${joined.kind === 'branches' ? `joined (${joined.join}) · ` : `${count(joined.items, 'item')}, ${joined.completed} completed${joined.failed.length ? `, ${joined.failed.length} failed` : ''}${joined.stopped ? `, ${joined.stopped} stopped` : ''} · `}<span class=${joined.ok ? 'ok' : 'bad'}>${joined.ok ? 'ok' : 'failed'}</span>`;
  return html`<li class="group" data-testid="timeline-group" data-step=${group.step}>
    <div class="step-head"><strong>${group.step}</strong> · ${group.parallel ? 'parallel' : 'foreach'} · ${state}</div>
    <ol class="lanes">
      ${group.lanes.map(
        (lane) => html`<li class="lane" data-testid="timeline-lane" data-lane=${lane.key}>
        <div class="lane-head">${laneHead(group, lane)}</div>
        <ol class="steps">${lane.placed.map((p) => placedItem(p, tools))}</ol>
      </li>`,
      )}
    </ol>
  </li>`;
}

function laneHead(group: Group, lane: Group['lanes'][number]) {
  const joined = group.joined;
  if (group.parallel) {
    const ended = joined?.kind === 'branches' ? joined.branches[lane.key] : undefined;
    return html`branch ${lane.key}${
      ended
        ? html` · <span class=${ended.status === 'completed' ? 'ok' : ended.status === 'failed' ? 'bad' : 'running'}>${ended.status}${ended.message ? `: ${ended.message}` : ''}</span>`
        : null
    }`;
  }
  const failed = joined?.kind === 'items' ? joined.failed.find((f) => `${f.index}` === lane.key) : undefined;
  return html`item ${lane.key}${lane.value === undefined ? '' : `: ${lane.value}`}${
    failed ? html` · <span class="bad">failed: ${failed.message}</span>` : null
  }`;
}

function markText(node: Exclude<Mark, SteeringNode>): string {
  switch (node.kind) {
    case 'route':
      return `route ${node.step} → ${node.target}${
        node.agent !== undefined
          ? ` · by ${node.agent}${node.reason ? `: ${node.reason}` : ''}`
          : ` · ${JSON.stringify(node.value)} ${node.case === undefined ? 'matched no case: default' : 'matched'}`
      }`;
    case 'skipped':
      return `${node.step} · skipped: ${node.when} was false`;
    case 'handoff':
      return `hand-off from the join of ${node.join} → ${node.to} (${node.step})`;
  }
}

function stepOutcome(s: StepTrace) {
  const o = s.outcome;
  if (!o) return html`<span class="running">running</span>`;
  // A reused step spent nothing here: its output is the original task's.
  const spent = o.reused
    ? ' · reused from the original, not run again'
    : ` · ${duration(o.durationMs)} · ${tokens(o.usage)} · ${cost(o.usage.costUsd)}`;
  return html`<span class=${o.ok ? 'ok' : 'bad'}>${o.ok ? 'ok' : `failed${o.error ? ` (${o.error.code})` : ''}`}</span>${
    o.verdict
      ? html`${' · '}<span class=${`verdict ${o.verdict.decision}`}>${o.verdict.decision}</span>`
      : null
  }${spent}`;
}

function entry(e: Entry) {
  switch (e.kind) {
    case 'model': {
      const head = html`model ${e.reply?.model ?? e.model} · turn ${e.turn}`;
      if (!e.reply && !e.error) return html`<span>${head} · <span class="running">waiting</span></span>`;
      return html`<details>
        <summary>
          ${head}
          ${
            e.reply
              ? e.reply.journaled
                ? ' · replayed from the journal'
                : html` · ${tokens(e.reply)} · ${cost(e.reply.costUsd)} · ${duration(e.reply.durationMs)}`
              : html` · <span class="bad">${e.error?.code}</span>`
          }
        </summary>
        <dl>
          ${e.reply ? html`<dt>finish</dt><dd>${e.reply.finishReason}</dd>` : null}
          ${e.error ? html`<dt>error</dt><dd>${e.error.message}</dd>` : null}
          ${e.retries.map((r) => html`<dt>retry</dt><dd>attempt ${r.attempt}: ${r.code}, waited ${duration(r.delayMs)}</dd>`)}
          ${e.fallbacks.map((f) => html`<dt>fallback</dt><dd>${f.from} → ${f.to} (${f.code})</dd>`)}
        </dl>
      </details>`;
    }
    case 'tool':
      return html`<details data-testid="tool-call">
        <summary>
          ${`tool ${e.tool} · `}${
            e.result
              ? html`<span class=${e.result.decision}>${e.result.decision}</span>${' · '}<span class=${e.result.ok ? 'ok' : 'bad'}>${e.result.ok ? 'ok' : (e.result.error?.code ?? 'failed')}</span>${` · ${duration(e.result.durationMs)}`}`
              : html`<span class="running">running</span>`
          }
        </summary>
        <pre class="args">${e.arguments}</pre>
        ${e.result ? html`<pre class="output">${e.result.output}</pre>` : null}
      </details>`;
    case 'approval': {
      const d = e.decided;
      return html`<span>${`approval ${e.approvalId} for ${e.tool} · `}${
        d
          ? html`<span class=${d.decision === 'allow' ? 'ok' : 'bad'}>${d.decision === 'allow' ? 'allowed' : 'denied'}</span>${` by ${d.by ?? 'someone'} after ${duration(d.waitedMs)}${d.reason ? `: ${d.reason}` : ''}`}`
          : html`<span class="running">waiting for a person</span>`
      }</span>`;
    }
    case 'question':
      return html`<span>question: ${e.question} · ${e.answered ? `answered by ${e.answered.by ?? 'someone'}: ${e.answered.answer}` : html`<span class="running">waiting for an answer</span>`}</span>`;
    case 'compaction':
      return html`<span>summary: ${count(e.before, 'message')} → ${e.after}</span>`;
    case 'told':
      return html`<span class="told" data-testid="timeline-told">${toldEntryText(e)}</span>`;
  }
}
