import { styleText } from 'node:util';
import type { InvalidMessageEvent, TroupeEvent, ValueRef } from '@troupe/protocol';
import { tokenCounts } from './cacheTokens.ts';

type Style = Parameters<typeof styleText>[0];

/** How the kinds look in a terminal: what matters most stands out. */
const KIND_STYLE: Partial<Record<string, Style>> = {
  'task.accepted': 'cyan',
  'task.resumed': 'yellow',
  'task.paused': ['yellow', 'bold'],
  'task.told': ['magenta', 'bold'],
  'task.completed': ['green', 'bold'],
  'task.failed': ['red', 'bold'],
  'task.cancelled': ['yellow', 'bold'],
  'eval.scored': 'cyan',
  'agent.handoff': 'magenta',
  'step.started': 'blue',
  'step.completed': 'blue',
  'llm.error': 'red',
  'llm.retry': 'yellow',
  'llm.fallback': 'yellow',
  'llm.delta': 'gray',
  'tool.progress': 'gray',
  'approval.requested': ['yellow', 'bold'],
  'human.asked': ['yellow', 'bold'],
  'message.invalid': ['red', 'bold'],
};

/** Lines that only say how a call is getting on are dimmed whole, so results stand out among them. */
const SUMMARY_STYLE: Partial<Record<string, Style>> = {
  'tool.progress': 'dim',
};

export interface FormatOptions {
  color: boolean;
}

/** One readable line per event: time, task, from → to, kind, and what it says. */
/** Where the whole of a value shown only in part is kept, so a line never hides that it was cut. */
function whereWhole(ref: ValueRef | undefined): string {
  return ref ? `  (whole: ${ref.bytes} bytes, nats object get ${ref.bucket} ${ref.name})` : '';
}

export function formatEvent(event: TroupeEvent, options: FormatOptions): string {
  const paint = (style: Style | undefined, text: string) =>
    options.color && style ? styleText(style, text) : text;
  const time = event.ts.slice(11, 23);
  const route = event.from || event.to ? `${event.from ?? '·'} → ${event.to ?? '·'}` : '';
  return [
    paint('gray', time),
    paint('gray', `${event.pipeline}/${event.taskId}`),
    route.padEnd(30),
    // A step that failed stands out as a failure, not as one more step that ended.
    paint(
      event.kind === 'step.completed' && !event.data.ok ? 'red' : KIND_STYLE[event.kind],
      event.kind.padEnd(16),
    ),
    paint(SUMMARY_STYLE[event.kind], summarize(event)),
  ].join('  ');
}

export function formatInvalid(event: InvalidMessageEvent, options: FormatOptions): string {
  const paint = (style: Style, text: string) => (options.color ? styleText(style, text) : text);
  const where = event.issues.map((i) => (i.path ? `${i.path}: ${i.message}` : i.message)).join('; ');
  return `${paint('gray', event.ts.slice(11, 23))}  ${paint(['red', 'bold'], 'message.invalid')}  ${event.subject}  ${event.reason}${where && !event.reason.includes(where) ? ` (${where})` : ''}`;
}

const oneLine = (text: string, max = 100): string => {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
};

/** A step, and the foreach item it ran for: `build[3]`. */
const stepOf = (d: { step: string; item?: number | undefined }) =>
  d.item === undefined ? d.step : `${d.step}[${d.item}]`;

/** A restart's or fork's workspace files: how many it carried from its origin, or why none. */
function carriedFiles({
  workspace,
  origin,
}: Extract<TroupeEvent, { kind: 'task.accepted' }>['data']): string {
  if (workspace === undefined) return '';
  if (workspace.note) return ` · ${oneLine(workspace.note, 400)}`;
  return ` · ${workspace.files} workspace files (${workspace.bytes} bytes) carried from ${origin?.taskId ?? 'its origin'}`;
}

const usd = (cost: number) => (cost > 0 ? ` $${cost.toFixed(4)}` : '');

function summarize(event: TroupeEvent): string {
  switch (event.kind) {
    case 'task.accepted':
      return `${oneLine(event.data.goal)}${carriedFiles(event.data)}`;
    case 'task.resumed':
      return event.data.after === 'pause'
        ? `in step ${event.data.state}, round ${event.data.round}, after a pause of ${Math.round((event.data.pausedMs ?? 0) / 1000)} s${event.data.by ? ` (by ${event.data.by})` : ''}`
        : `in step ${event.data.state}, round ${event.data.round} (delivery ${event.data.deliveries})`;
    case 'task.paused':
      return `in step ${event.data.state}, round ${event.data.round}${event.data.by ? ` by ${event.data.by}` : ''}${event.data.reason ? `: ${oneLine(event.data.reason, 80)}` : ''}`;
    case 'task.told':
      return `${event.data.by ? `${event.data.by}: ` : ''}${oneLine(event.data.text)}`;
    case 'agent.told':
      return `${event.data.agent} read ${event.data.messageIds.join(', ')} before turn ${event.data.turn}`;
    case 'step.started':
      return `${stepOf(event.data)} (round ${event.data.round})`;
    case 'step.skipped':
      return `${stepOf(event.data)}: when ${oneLine(event.data.when, 80)} was false`;
    case 'route.chosen':
      return `${stepOf(event.data)} → ${event.data.target} (${oneLine(event.data.value, 40)}${event.data.case === undefined ? ', default' : ''})${event.data.reason ? `: ${oneLine(event.data.reason, 80)}` : ''}`;
    case 'branches.joined':
      return `${event.data.step} (${event.data.join}) ${event.data.ok ? 'ok' : 'failed'}: ${Object.entries(
        event.data.branches,
      )
        .map(([branch, b]) => `${branch} ${b.status}`)
        .join(', ')}`;
    case 'items.joined':
      return `${event.data.step}: ${event.data.completed} of ${event.data.items} items done${
        event.data.failed.length > 0
          ? `, ${event.data.failed.length} failed (${event.data.failed
              .slice(0, 3)
              .map((f) => `#${f.index}: ${oneLine(f.message, 60)}`)
              .join('; ')})`
          : ''
      }${event.data.stopped > 0 ? `, ${event.data.stopped} not run` : ''}`;
    case 'agent.handoff':
      return `${stepOf(event.data)}${event.data.reason === 'rework' ? ' — rework' : ''}${event.data.join === undefined ? '' : ` — after the join of ${event.data.join}`}`;
    case 'llm.request':
      return `turn ${event.data.turn} · ${event.data.provider}:${event.data.model} · ${event.data.messages} messages`;
    case 'llm.response': {
      const calls = event.data.toolCalls.map((c) => c.name).join(', ');
      const what = calls ? `calls ${calls}` : oneLine(event.data.content, 70);
      return `${tokenCounts(event.data.usage)}${usd(event.data.costUsd)} · ${what}`;
    }
    case 'llm.delta':
      return oneLine(event.data.text || (event.data.toolCalls ?? []).map((c) => c.arguments).join(''), 90);
    case 'llm.retry':
      return `attempt ${event.data.attempt} failed (${event.data.code}); retrying in ${Math.round(event.data.delayMs)} ms · ${oneLine(event.data.message, 70)}`;
    case 'llm.fallback':
      return `${event.data.code}: falling back to ${event.data.to}`;
    case 'llm.error':
      return `${event.data.code}: ${oneLine(event.data.message)}`;
    case 'context.compacted':
      return `${event.data.before} → ${event.data.after} messages (~${event.data.estimatedTokens} tokens): ${oneLine(event.data.summary, 70)}`;
    case 'session.compacted':
      return `session ${event.data.session}: turns 1–${event.data.turns} summarized by ${event.data.agent} · ${tokenCounts(event.data.usage)}${usd(event.data.costUsd)} · ${oneLine(event.data.summary, 60)}`;
    case 'tool.call':
      return `${event.data.tool} ${oneLine(event.data.arguments, 80)}`;
    case 'tool.progress': {
      const { tool, progress, total, message } = event.data;
      const amount = total === undefined ? `${progress}` : `${progress}/${total}`;
      return `${tool} ${amount}${message ? ` ${oneLine(message, 80)}` : ''}`;
    }
    case 'tool.result':
      return event.data.ok
        ? `${event.data.tool} ok (${Math.round(event.data.durationMs)} ms) ${oneLine(event.data.output, 60)}${whereWhole(event.data.outputRef)}`
        : `${event.data.tool} ${event.data.error?.code ?? 'error'}: ${oneLine(event.data.error?.message ?? event.data.output, 80)}`;
    case 'approval.requested':
      return `${event.data.tool} ${oneLine(event.data.arguments, 60)} — ${event.data.reason}  (troupe approve|deny ${event.data.approvalId})`;
    case 'approval.decided':
      return `${event.data.approvalId} ${event.data.decision}${event.data.by ? ` by ${event.data.by}` : ''}${event.data.reason ? `: ${event.data.reason}` : ''}`;
    case 'human.asked':
      return `${event.data.questionId}: ${oneLine(event.data.question, 90)}  (troupe answer ${event.data.questionId} "…")`;
    case 'human.answered':
      return `${event.data.questionId}: ${oneLine(event.data.answer, 90)}`;
    case 'step.completed': {
      const verdict = event.data.verdict
        ? `${event.data.verdict.decision}: ${oneLine(event.data.verdict.feedback, 70)}`
        : '';
      const body = event.data.ok
        ? (verdict || oneLine(event.data.output, 70)) + whereWhole(event.data.outputRef)
        : `FAILED (${event.data.error?.code ?? 'error'}): ${oneLine(event.data.error?.message ?? '', 120)}`;
      return `${stepOf(event.data)} · ${tokenCounts(event.data.usage)} · ${body}`;
    }
    case 'task.completed':
      return `${event.data.approved === false ? 'UNAPPROVED (review bound reached) · ' : ''}${event.data.rounds} round(s), ${tokenCounts(event.data.usage)}${usd(event.data.usage.costUsd)}, ${(event.data.durationMs / 1000).toFixed(1)} s · ${oneLine(event.data.output, 60)}${whereWhole(event.data.outputRef)}`;
    case 'task.failed':
      return `${event.data.reason}: ${oneLine(event.data.message, 120)}`;
    case 'task.cancelled':
      return event.data.reason ?? '';
    case 'eval.scored':
      return scored(event.data);
  }
}

/** An online score: passed or not, each scorer's value (a failed one with why), and what judging cost. */
function scored(d: Extract<TroupeEvent, { kind: 'eval.scored' }>['data']): string {
  const of = `the ${d.status} task (sample ${d.sample})`;
  if (d.error !== undefined) return `ERROR scoring ${of}: ${oneLine(d.error, 120)}`;
  const passed = d.scores.filter((score) => score.pass).length;
  const each = d.scores.map(
    (score) =>
      `${score.scorer} ${score.value.toFixed(2)}${score.pass ? '' : ` ✗ ${oneLine(score.reason, 60)}`}`,
  );
  return [`${d.pass ? 'PASS' : 'FAIL'} ${passed}/${d.scores.length}`, ...each].join(' · ') + usd(d.costUsd);
}
