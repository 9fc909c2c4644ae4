import { html } from 'htm/preact';
import { cost, duration, tokens } from './format.ts';

/** The trace of a task, as `GET /v1/tasks/{id}/trace` gives it (the shape `troupe trace --json` prints). */
export interface Trace {
  taskId: string;
  pipeline: string;
  goal?: string;
  status: string;
  durationMs?: number;
  failure?: { reason: string; message: string };
  output?: unknown;
  totals: {
    inputTokens: number;
    outputTokens: number;
    cachedTokens: number;
    costUsd: number;
    modelCalls: number;
    toolCalls: number;
    approvals: number;
    retries: number;
    errors: number;
  };
  steps: StepTrace[];
}

interface StepTrace {
  stepId: string;
  step: string;
  agent: string;
  round: number;
  outcome?: {
    ok: boolean;
    durationMs: number;
    usage: { inputTokens: number; outputTokens: number; cachedTokens: number; costUsd: number };
    verdict?: { decision: string; feedback?: string };
    error?: { code: string; message: string };
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
  | { kind: 'compaction'; before: number; after: number };

/** A task's timeline: each step with its outcome, and under it each model and tool call, opened on a click. */
export function Timeline(props: { trace: Trace }) {
  const { trace } = props;
  return html`<div class="timeline" data-testid="timeline">
    <h3>${trace.taskId} <span class=${`status ${trace.status}`}>${trace.status}</span></h3>
    ${trace.goal ? html`<p class="goal">${trace.goal}</p>` : null}
    <ol class="steps">
      ${trace.steps.map(
        (
          s,
        ) => html`<li class="step" data-testid="timeline-step" data-step=${s.step} data-verdict=${s.outcome?.verdict?.decision ?? ''}>
          <div class="step-head">
            <strong>${s.step}</strong>${` · ${s.agent} · round ${s.round} · `}${stepOutcome(s)}
          </div>
          ${s.outcome?.verdict?.feedback ? html`<p class=${`feedback ${s.outcome.verdict.decision}`}>${s.outcome.verdict.feedback}</p>` : null}
          <ul class="entries">
            ${s.entries.map((e) => html`<li>${entry(e)}</li>`)}
          </ul>
        </li>`,
      )}
    </ol>
    ${trace.failure ? html`<p class="bad">failed: ${trace.failure.reason}: ${trace.failure.message}</p>` : null}
    <p class="totals">
      ${trace.totals.modelCalls} model calls · ${tokens(trace.totals)} · ${cost(trace.totals.costUsd)} ·
      ${trace.totals.toolCalls} tool calls${trace.totals.approvals ? ` · ${trace.totals.approvals} approvals` : ''}
      ${trace.durationMs === undefined ? '' : ` · ${duration(trace.durationMs)}`}
    </p>
  </div>`;
}

function stepOutcome(s: StepTrace) {
  const o = s.outcome;
  if (!o) return html`<span class="running">running</span>`;
  const spent = ` · ${duration(o.durationMs)} · ${tokens(o.usage)} · ${cost(o.usage.costUsd)}`;
  return html`<span class=${o.ok ? 'ok' : 'bad'}>${o.ok ? 'ok' : (o.error?.code ?? 'failed')}</span>${
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
      return html`<span>summary: ${e.before} messages → ${e.after}</span>`;
  }
}
