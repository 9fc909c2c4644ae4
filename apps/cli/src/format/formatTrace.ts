import { styleText } from 'node:util';
import type {
  BranchesJoinNode,
  FlowNode,
  FlowPlace,
  HandoffNode,
  ItemsJoinNode,
  RouteNode,
  SkipNode,
  StepTrace,
  TaskTrace,
  TraceEntry,
  TraceTotals,
} from '@troupe/client';
import { tokenCounts } from './cacheTokens.ts';
import { formatDuration } from './duration.ts';

type Style = Parameters<typeof styleText>[0];
type Paint = (style: Style, text: string) => string;

/** A line of the tree with the lines it continues onto, what hangs under it, and lines said after those. */
interface Branch {
  lines: string[];
  children: Branch[];
  after?: string[];
}

/** How much of a tool's arguments and output a line shows. */
const PREVIEW = 60;

const preview = (text: string, max = PREVIEW): string => {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length <= max ? line : `${line.slice(0, max - 1)}…`;
};
const cost = (usd: number) => `$${usd.toFixed(4)}`;
const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/**
 * A task's trace as a tree for the terminal: the task and its totals, each step with its outcome in the flow's
 * shape (route choices, parallel branches and their join, foreach items, sub-pipeline tasks), and under it
 * each model call (model, tokens, cost, latency, finish reason; retries and fallbacks), tool call (arguments,
 * permission decision, result, duration), approval (who decided, after how long), question and summary.
 */
export function formatTrace(trace: TaskTrace, options: { color: boolean }): string {
  const paint = (style: Style, text: string) => (options.color ? styleText(style, text) : text);
  const lines: string[] = [];
  const status =
    trace.status === 'completed'
      ? paint('green', 'completed')
      : trace.status === 'running'
        ? paint('yellow', 'running')
        : paint('red', trace.status);
  const took = trace.durationMs === undefined ? '' : ` in ${formatDuration(trace.durationMs)}`;
  lines.push(
    `${paint('bold', `task ${trace.taskId}`)} · ${trace.pipeline}${trace.version === undefined ? '' : `@${trace.version.slice(0, 12)}`} · ${status}${took}` +
      (trace.resumed > 0 ? ` · resumed ${plural(trace.resumed, 'time')}` : ''),
  );
  if (trace.goal !== undefined) lines.push(`goal: ${preview(trace.goal, 100)}`);
  if (trace.origin) lines.push(`origin: ${originLine(trace.origin)}`);
  if (trace.origin && trace.originFiles) lines.push(`files: ${filesLine(trace.origin, trace.originFiles)}`);
  draw(flowTree(trace, paint), '', lines);
  if (trace.failure) {
    lines.push(paint('red', `failed: ${trace.failure.reason}: ${preview(trace.failure.message, 200)}`));
  }
  if (trace.cancelReason !== undefined) lines.push(`cancelled: ${trace.cancelReason}`);
  lines.push(totalsLine(trace.totals, trace.status === 'running'));
  return lines.join('\n');
}

/** Draws branches under `indent`, each with its connector, the lines it continues onto, and its own branches. */
function draw(branches: readonly Branch[], indent: string, lines: string[]): void {
  branches.forEach((branch, i) => {
    const last = i === branches.length - 1;
    const [head, ...rest] = branch.lines;
    lines.push(`${indent}${last ? '└─' : '├─'} ${head}`);
    const under = `${indent}${last ? '   ' : '│  '}`;
    for (const more of rest) lines.push(`${under}   ${more}`);
    draw(branch.children, under, lines);
    for (const more of branch.after ?? []) lines.push(`${under}   ${more}`);
  });
}

/** A parallel or foreach step as the trace met it: its branches or items, each a lane of what ran in it. */
interface Group {
  kind: 'group';
  step: string;
  parallel: boolean;
  lanes: { key: string; value?: string | undefined; nodes: Placed[] }[];
  joined?: BranchesJoinNode | ItemsJoinNode;
}
type Placed = Group | { kind: 'step'; step: StepTrace } | { kind: 'mark'; node: Mark };
/** A line of the flow between its steps: a route, a skip, a hand-off from a join, or a person's hold or message. */
type Mark = RouteNode | SkipNode | HandoffNode | Extract<FlowNode, { kind: 'paused' | 'resumed' | 'told' }>;

/**
 * The flow as a tree: steps, route choices, skipped steps and hand-offs from a join in the order they happened, each
 * parallel step's branches and each foreach step's items nested under it with how its join ended, and each
 * sub-pipeline's task under its step.
 */
function flowTree(trace: TaskTrace, paint: Paint): Branch[] {
  const steps = new Map(trace.steps.map((step) => [step.stepId, step]));
  const root: Placed[] = [];
  /** The open group of a step in a list: the one its join has not closed. */
  const groupIn = (list: Placed[], step: string, parallel: boolean): Group => {
    const open = list.findLast((p): p is Group => p.kind === 'group' && p.step === step && !p.joined);
    if (open) return open;
    const group: Group = { kind: 'group', step, parallel, lanes: [] };
    list.push(group);
    return group;
  };
  const listAt = (within: readonly FlowPlace[] | undefined): Placed[] => {
    let list = root;
    for (const place of within ?? []) {
      const parallel = place.branch !== undefined;
      const group = groupIn(list, place.step, parallel);
      const key = parallel ? (place.branch as string) : `${place.item ?? '?'}`;
      let lane = group.lanes.find((l) => l.key === key);
      if (!lane) {
        lane = { key, value: place.value, nodes: [] };
        group.lanes.push(lane);
      }
      lane.value ??= place.value;
      list = lane.nodes;
    }
    return list;
  };
  for (const node of trace.flow) {
    switch (node.kind) {
      case 'step': {
        const step = steps.get(node.stepId);
        if (step) listAt(step.within).push({ kind: 'step', step });
        break;
      }
      case 'branches':
      case 'items':
        groupIn(listAt(node.within), node.step, node.kind === 'branches').joined = node;
        break;
      case 'handoff':
        // Every step is handed its work; only a hand-off from a join says more than the order does (a rework's
        // shows as the step's next round).
        if (node.join !== undefined) listAt(node.within).push({ kind: 'mark', node });
        break;
      case 'paused':
      case 'resumed':
      case 'told':
        // A person's hold, resume or message is the task's, wherever its flow stood: at the top, in its order.
        root.push({ kind: 'mark', node });
        break;
      default:
        listAt(node.within).push({ kind: 'mark', node });
    }
  }
  return root.map((placed) => branchOf(placed, paint));
}

function branchOf(placed: Placed, paint: Paint): Branch {
  switch (placed.kind) {
    case 'step':
      return stepBranch(placed.step, paint);
    case 'mark':
      return { lines: [markLine(placed.node, paint)], children: [] };
    case 'group':
      return placed.parallel ? parallelBranch(placed, paint) : foreachBranch(placed, paint);
  }
}

function stepBranch(step: StepTrace, paint: Paint): Branch {
  const children: Branch[] = step.entries.map((entry) => ({ lines: entryLines(entry, paint), children: [] }));
  const sub = step.subTask;
  if (sub) {
    const head = `sub-task ${sub.taskId} · ${sub.pipeline}`;
    children.push(
      sub.trace
        ? { lines: [`${head} · ${statusOf(sub.trace, paint)}`], children: flowTree(sub.trace, paint) }
        : { lines: [`${head} · its events are not stored`], children: [] },
    );
  }
  const error = step.outcome?.error;
  return {
    lines: [stepLine(step, paint)],
    children,
    ...(error ? { after: [paint('red', `${error.code}: ${preview(error.message, 160)}`)] } : {}),
  };
}

function parallelBranch(group: Group, paint: Paint): Branch {
  const joined = group.joined as BranchesJoinNode | undefined;
  // Branches that ran nothing (all skipped, or stopped first) are known from the join.
  for (const name of Object.keys(joined?.branches ?? {})) {
    if (!group.lanes.some((l) => l.key === name)) group.lanes.push({ key: name, nodes: [] });
  }
  const head = `${paint('bold', group.step)} · parallel`;
  const state = joined
    ? `joined (${joined.join}) · ${joined.ok ? paint('green', 'ok') : paint('red', 'failed')}`
    : paint('yellow', 'running');
  return {
    lines: [`${head} · ${state}`],
    children: group.lanes.map((lane) => {
      const ended = joined?.branches[lane.key];
      const how = !ended
        ? ''
        : ended.status === 'completed'
          ? ` · ${paint('green', 'completed')}`
          : ended.status === 'failed'
            ? ` · ${paint('red', `failed: ${preview(ended.message ?? '', 120)}`)}`
            : ` · ${paint('yellow', 'stopped')}`;
      return { lines: [`branch ${lane.key}${how}`], children: lane.nodes.map((p) => branchOf(p, paint)) };
    }),
  };
}

function foreachBranch(group: Group, paint: Paint): Branch {
  const joined = group.joined as ItemsJoinNode | undefined;
  // An item that failed before any of its steps started (its `when` could not be read) is known from the join.
  for (const { index } of joined?.failed ?? []) {
    if (!group.lanes.some((l) => l.key === `${index}`)) group.lanes.push({ key: `${index}`, nodes: [] });
  }
  group.lanes.sort((a, b) => Number(a.key) - Number(b.key));
  const head = `${paint('bold', group.step)} · foreach`;
  const counts = joined
    ? [
        plural(joined.items, 'item'),
        `${joined.completed} completed`,
        ...(joined.failed.length > 0 ? [paint('red', `${joined.failed.length} failed`)] : []),
        ...(joined.stopped > 0 ? [paint('yellow', `${joined.stopped} stopped`)] : []),
      ].join(', ')
    : paint('yellow', 'running');
  const state = joined ? ` · ${joined.ok ? paint('green', 'ok') : paint('red', 'failed')}` : '';
  return {
    lines: [`${head} · ${counts}${state}`],
    children: group.lanes.map((lane) => {
      const failed = joined?.failed.find((f) => `${f.index}` === lane.key);
      const value = lane.value === undefined ? '' : `: ${preview(lane.value)}`;
      const how = failed ? ` · ${paint('red', `failed: ${preview(failed.message, 120)}`)}` : '';
      return {
        lines: [`item ${lane.key}${value}${how}`],
        children: lane.nodes.map((p) => branchOf(p, paint)),
      };
    }),
  };
}

function markLine(node: Mark, paint: Paint): string {
  switch (node.kind) {
    case 'route': {
      const why =
        node.agent !== undefined
          ? ` · by ${node.agent}${node.reason ? `: ${preview(node.reason, 120)}` : ''}`
          : node.case !== undefined
            ? ` · ${JSON.stringify(preview(node.value))} matched`
            : ` · ${JSON.stringify(preview(node.value))} matched no case: default`;
      return `route ${paint('bold', node.step)} → ${node.target}${why}`;
    }
    case 'skipped':
      return `${paint('bold', node.step)} · skipped: ${preview(node.when, 100)} was false`;
    case 'handoff':
      return `hand-off from the join of ${node.join ?? node.from} → ${node.to} (${node.step})`;
    case 'paused':
      return `${paint('yellow', 'paused')}${node.by ? ` by ${node.by}` : ''} at ${node.state}${node.reason ? `: ${preview(node.reason, 120)}` : ''}`;
    case 'resumed':
      return `${paint('yellow', 'resumed')}${node.by ? ` by ${node.by}` : ''} at ${node.state}${node.pausedMs === undefined ? '' : ` after ${formatDuration(node.pausedMs)} paused`}`;
    case 'told':
      return `${paint('magenta', 'told')} ${node.messageId}${node.by ? ` by ${node.by}` : ''}: ${preview(node.text, 200)}`;
  }
}

function statusOf(trace: TaskTrace, paint: Paint): string {
  const took = trace.durationMs === undefined ? '' : ` in ${formatDuration(trace.durationMs)}`;
  if (trace.status === 'completed') return `${paint('green', 'completed')}${took}`;
  if (trace.status === 'running') return paint('yellow', 'running');
  const why = trace.failure ? `: ${trace.failure.reason}` : '';
  return `${paint('red', `${trace.status}${why}`)}${took}`;
}

function stepLine(step: StepTrace, paint: Paint): string {
  const head = `${paint('bold', step.step)} · ${step.agent} · round ${step.round}`;
  const outcome = step.outcome;
  if (!outcome) return `${head} · ${paint('yellow', 'running')}`;
  const verdict = outcome.verdict ? ` · ${outcome.verdict.decision}` : '';
  if (outcome.reused)
    return `${head} · ${paint('green', `reused${verdict}`)} (its origin's output; nothing ran)`;
  const result = outcome.ok
    ? paint('green', `ok${verdict}`)
    : paint('red', `failed${outcome.error ? ` (${outcome.error.code})` : ''}`);
  return `${head} · ${result} · ${formatDuration(outcome.durationMs)} · ${tokenCounts(outcome.usage)} · ${cost(outcome.usage.costUsd)}`;
}

function entryLines(entry: TraceEntry, paint: Paint): string[] {
  switch (entry.kind) {
    case 'model': {
      const lines: string[] = [];
      const reply = entry.reply;
      const what = `model ${reply?.model ?? entry.model} · turn ${entry.turn}`;
      if (reply) {
        lines.push(
          reply.journaled
            ? `${what} · replayed from the journal · ${reply.finishReason}`
            : `${what} · ${tokenCounts(reply)} · ${cost(reply.costUsd)} · ${formatDuration(reply.durationMs)} · ${reply.finishReason}`,
        );
      } else if (entry.error) {
        lines.push(`${what} · ${paint('red', `${entry.error.code}: ${preview(entry.error.message, 120)}`)}`);
      } else lines.push(`${what} · ${paint('yellow', 'waiting for the reply')}`);
      for (const retry of entry.retries) {
        lines.push(
          `retry after attempt ${retry.attempt}: ${retry.code}, waited ${formatDuration(retry.delayMs)}`,
        );
      }
      for (const fallback of entry.fallbacks) {
        lines.push(`fallback ${fallback.from} → ${fallback.to} (${fallback.code})`);
      }
      return lines;
    }
    case 'tool': {
      const call = `tool ${entry.tool}(${preview(entry.arguments)})`;
      const result = entry.result;
      if (!result) return [`${call} · ${paint('yellow', 'running')}`];
      const outcome = result.ok ? paint('green', 'ok') : paint('red', result.error?.code ?? 'error');
      const replayed = result.journaled ? ' · replayed from the journal' : '';
      // A result too large for its event is in the object store: say so, and how to see it whole.
      const whole = result.outputRef
        ? ` (${result.outputRef.bytes} bytes in ${result.outputRef.bucket}; troupe trace --json gives it whole)`
        : '';
      return [
        `${call} · ${result.decision} · ${outcome} · ${formatDuration(result.durationMs)}${replayed} · ${preview(result.output)}${whole}`,
      ];
    }
    case 'approval': {
      const asked = `approval ${entry.approvalId} for ${entry.tool}`;
      const decided = entry.decided;
      if (!decided) return [`${asked} · ${paint('yellow', 'waiting for a person')}`];
      const who = decided.expired
        ? decided.by === 'troupe'
          ? `closed after ${formatDuration(decided.waitedMs)}: ${decided.reason ?? 'its step stopped'}`
          : `denied: nobody decided within ${formatDuration(decided.waitedMs)}`
        : `${decided.decision === 'allow' ? 'allowed' : 'denied'} by ${decided.by ?? 'someone'} after ${formatDuration(decided.waitedMs)}`;
      return [`${asked} · ${decided.decision === 'allow' ? paint('green', who) : paint('red', who)}`];
    }
    case 'question': {
      const asked = `question ${entry.questionId}: ${preview(entry.question)}`;
      const answered = entry.answered;
      if (!answered) return [`${asked} · ${paint('yellow', 'waiting for an answer')}`];
      return [
        `${asked} · answered by ${answered.by ?? 'someone'} after ${formatDuration(answered.waitedMs)}: ${preview(answered.answer)}`,
      ];
    }
    case 'told':
      return [
        `read ${entry.messages.map((m) => (m.text === undefined ? m.id : `${m.id} ${JSON.stringify(preview(m.text, 120))}`)).join(', ')} before turn ${entry.turn}`,
      ];
    case 'compaction': {
      const what = `summary: ${entry.before} messages → ${entry.after} (about ${entry.estimatedTokens} tokens before)`;
      const reply = entry.reply;
      if (!reply) return [what];
      return [
        reply.journaled
          ? `${what} · by ${reply.model} · replayed from the journal`
          : `${what} · by ${reply.model} · ${tokenCounts(reply)} · ${cost(reply.costUsd)} · ${formatDuration(reply.durationMs)}`,
      ];
    }
  }
}

function totalsLine(totals: TraceTotals, running: boolean): string {
  const parts = [
    plural(totals.modelCalls, 'model call'),
    tokenCounts(totals),
    cost(totals.costUsd),
    plural(totals.toolCalls, 'tool call'),
    ...(totals.approvals > 0 ? [plural(totals.approvals, 'approval')] : []),
    ...(totals.questions > 0 ? [plural(totals.questions, 'question')] : []),
    ...(totals.retries > 0 ? [plural(totals.retries, 'retry', 'retries')] : []),
    ...(totals.fallbacks > 0 ? [plural(totals.fallbacks, 'fallback')] : []),
    ...(totals.errors > 0 ? [plural(totals.errors, 'error')] : []),
  ];
  return `${running ? 'so far' : 'totals'}: ${parts.join(' · ')}`;
}

/** A restart's or fork's workspace files: how many it carried from its origin, or why none. */
function filesLine(
  origin: NonNullable<TaskTrace['origin']>,
  files: NonNullable<TaskTrace['originFiles']>,
): string {
  if (files.note) return files.note;
  return `${plural(files.files, 'file')} (${files.bytes} bytes) carried from task ${origin.taskId}, as they were when ${origin.step} started there`;
}

/** A restart's or fork's origin: which task, from which step, and what a fork edited. */
function originLine(origin: NonNullable<TaskTrace['origin']>): string {
  const edited = origin.edited?.length ? `, edited ${origin.edited.join(', ')}` : '';
  const by = origin.by ? ` by ${origin.by}` : '';
  const newest = origin.newest ? ", on the pipeline's newest version" : '';
  return origin.kind === 'restart'
    ? `restart of task ${origin.taskId} from ${origin.step}${newest}${by}`
    : `fork of task ${origin.taskId} at ${origin.step}${edited}${newest}${by}`;
}
