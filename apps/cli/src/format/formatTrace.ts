import { styleText } from 'node:util';
import type { StepTrace, TaskTrace, TraceEntry, TraceTotals } from '@troupe/client';
import { formatDuration } from './duration.ts';

type Style = Parameters<typeof styleText>[0];

/** How much of a tool's arguments and output a line shows. */
const PREVIEW = 60;

const preview = (text: string, max = PREVIEW): string => {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length <= max ? line : `${line.slice(0, max - 1)}…`;
};
const tokens = (usage: { inputTokens: number; outputTokens: number; cachedTokens: number }) =>
  `${usage.inputTokens}→${usage.outputTokens} tok${usage.cachedTokens > 0 ? ` (${usage.cachedTokens} cached)` : ''}`;
const cost = (usd: number) => `$${usd.toFixed(4)}`;
const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/**
 * A task's trace as a tree for the terminal: the task and its totals, each step with its outcome, and under it
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
  trace.steps.forEach((step, i) => {
    const last = i === trace.steps.length - 1;
    lines.push(`${last ? '└─' : '├─'} ${stepLine(step, paint)}`);
    const indent = last ? '   ' : '│  ';
    step.entries.forEach((entry, j) => {
      const lastEntry = j === step.entries.length - 1;
      const [head, ...rest] = entryLines(entry, paint);
      lines.push(`${indent}${lastEntry ? '└─' : '├─'} ${head}`);
      for (const more of rest) lines.push(`${indent}${lastEntry ? '   ' : '│  '}   ${more}`);
    });
    if (step.outcome?.error) {
      lines.push(
        `${indent}   ${paint('red', `${step.outcome.error.code}: ${preview(step.outcome.error.message, 160)}`)}`,
      );
    }
  });
  if (trace.failure) {
    lines.push(paint('red', `failed: ${trace.failure.reason}: ${preview(trace.failure.message, 200)}`));
  }
  if (trace.cancelReason !== undefined) lines.push(`cancelled: ${trace.cancelReason}`);
  lines.push(totalsLine(trace.totals, trace.status === 'running'));
  return lines.join('\n');
}

function stepLine(step: StepTrace, paint: (style: Style, text: string) => string): string {
  const head = `${paint('bold', step.step)} · ${step.agent} · round ${step.round}`;
  const outcome = step.outcome;
  if (!outcome) return `${head} · ${paint('yellow', 'running')}`;
  const verdict = outcome.verdict ? ` · ${outcome.verdict.decision}` : '';
  const result = outcome.ok ? paint('green', `ok${verdict}`) : paint('red', outcome.error?.code ?? 'failed');
  return `${head} · ${result} · ${formatDuration(outcome.durationMs)} · ${tokens(outcome.usage)} · ${cost(outcome.usage.costUsd)}`;
}

function entryLines(entry: TraceEntry, paint: (style: Style, text: string) => string): string[] {
  switch (entry.kind) {
    case 'model': {
      const lines: string[] = [];
      const reply = entry.reply;
      const what = `model ${reply?.model ?? entry.model} · turn ${entry.turn}`;
      if (reply) {
        lines.push(
          reply.journaled
            ? `${what} · replayed from the journal · ${reply.finishReason}`
            : `${what} · ${tokens(reply)} · ${cost(reply.costUsd)} · ${formatDuration(reply.durationMs)} · ${reply.finishReason}`,
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
    case 'compaction': {
      const what = `summary: ${entry.before} messages → ${entry.after} (about ${entry.estimatedTokens} tokens before)`;
      const reply = entry.reply;
      if (!reply) return [what];
      return [
        reply.journaled
          ? `${what} · by ${reply.model} · replayed from the journal`
          : `${what} · by ${reply.model} · ${tokens(reply)} · ${cost(reply.costUsd)} · ${formatDuration(reply.durationMs)}`,
      ];
    }
  }
}

function totalsLine(totals: TraceTotals, running: boolean): string {
  const parts = [
    plural(totals.modelCalls, 'model call'),
    tokens(totals),
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
