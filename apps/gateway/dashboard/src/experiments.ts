import { html } from 'htm/preact';
import { useCallback, useEffect, useState } from 'preact/hooks';
import type { Api } from './client.ts';
import {
  byChange,
  type CaseComparison,
  changedScorers,
  costChange,
  type EvalComparison,
  type ExperimentSummary,
  firstSide,
  passRate,
  percent,
  scoreChange,
  signed,
  signedCost,
} from './evalShapes.ts';
import { cost, duration, since } from './format.ts';
import { Timeline, type Trace } from './timeline.ts';

const ENC = encodeURIComponent;

/**
 * The Experiments view: the experiments stored (`GET /v1/evals/experiments`), two of them picked as A and B and
 * compared (`GET /v1/evals/compare`), and a case of the comparison opened on its timeline.
 */
export function ExperimentsView(props: {
  api: Api;
  onOpenTask: (taskId: string) => void;
  onError: (e: unknown) => void;
}) {
  const { api, onError } = props;
  const [experiments, setExperiments] = useState<ExperimentSummary[] | undefined>(undefined);
  const [a, setA] = useState('');
  const [b, setB] = useState('');
  const load = useCallback(async () => {
    const list = await api.get<{ experiments: ExperimentSummary[] }>('/v1/evals/experiments');
    setExperiments(list.experiments);
  }, [api]);
  useEffect(() => {
    void load().catch(onError);
  }, [load, onError]);

  return html`<main class="evals">
    <section class="experiments">
      <div class="panel-head">
        <h2>Experiments</h2>
        <button class="small quiet" onClick=${() => void load().catch(onError)} data-testid="experiments-reload">Reload</button>
      </div>
      ${
        experiments === undefined
          ? html`<p class="hint">Loading…</p>`
          : experiments.length === 0
            ? html`<p class="hint">No experiment is stored yet: <code>troupe eval run</code> stores one.</p>`
            : html`<${ExperimentTable} experiments=${experiments} a=${a} b=${b} onA=${setA} onB=${setB} />`
      }
    </section>
    <section class="comparison">
      <div class="pick">
        <label>A <${Pick} testid="compare-a" value=${a} experiments=${experiments ?? []} onPick=${setA} /></label>
        <label>B <${Pick} testid="compare-b" value=${b} experiments=${experiments ?? []} onPick=${setB} /></label>
      </div>
      ${
        a && b
          ? html`<${Comparison} key=${`${a}|${b}`} api=${api} a=${a} b=${b} onOpenTask=${props.onOpenTask} />`
          : html`<p class="hint">Pick an experiment as A (the baseline) and one as B to compare them case by case.</p>`
      }
    </section>
  </main>`;
}

function ExperimentTable(props: {
  experiments: ExperimentSummary[];
  a: string;
  b: string;
  onA: (id: string) => void;
  onB: (id: string) => void;
}) {
  return html`<table class="task-list experiment-list" data-testid="experiments">
    <thead>
      <tr><th>experiment</th><th>dataset</th><th>mode</th><th>passed</th><th>mean score</th><th>cost</th><th>when</th><th></th></tr>
    </thead>
    <tbody>
      ${props.experiments.map(
        (
          e,
        ) => html`<tr key=${e.id} data-testid="experiment-row" data-experiment=${e.id} class=${e.id === props.a || e.id === props.b ? 'selected' : ''}>
          <td class="id" title=${e.id}>${e.id}</td>
          <td>${e.dataset.name}@${e.dataset.version}</td>
          <td>${e.mode}</td>
          <td>${passRate(e.totals)}</td>
          <td>${e.totals.meanScore.toFixed(2)}</td>
          <td>${cost(e.totals.costUsd)}</td>
          <td title=${e.startedAt}>${since(e.startedAt)} ago</td>
          <td class="ab">
            <button class=${`small ${e.id === props.a ? '' : 'quiet'}`} onClick=${() => props.onA(e.id)} data-testid="pick-a">A</button>
            <button class=${`small ${e.id === props.b ? '' : 'quiet'}`} onClick=${() => props.onB(e.id)} data-testid="pick-b">B</button>
          </td>
        </tr>`,
      )}
    </tbody>
  </table>`;
}

function Pick(props: {
  testid: string;
  value: string;
  experiments: ExperimentSummary[];
  onPick: (id: string) => void;
}) {
  return html`<select value=${props.value} onChange=${(e: Event) => props.onPick((e.target as HTMLSelectElement).value)} data-testid=${props.testid}>
    <option value="">–</option>
    ${props.experiments.map((e) => html`<option value=${e.id}>${e.id}</option>`)}
  </select>`;
}

/** B against A: the summary, a row per case, and the case opened. */
function Comparison(props: { api: Api; a: string; b: string; onOpenTask: (taskId: string) => void }) {
  const { api } = props;
  const [comparison, setComparison] = useState<EvalComparison | undefined>(undefined);
  const [refusal, setRefusal] = useState<string | undefined>(undefined);
  const [open, setOpen] = useState<{ caseId: string; side: 'a' | 'b' } | undefined>(undefined);
  useEffect(() => {
    api
      .get<EvalComparison>(`/v1/evals/compare?a=${ENC(props.a)}&b=${ENC(props.b)}`)
      .then(setComparison, (e: unknown) => setRefusal(e instanceof Error ? e.message : String(e)));
  }, [api, props.a, props.b]);
  if (refusal) return html`<p class="error" role="alert" data-testid="comparison-refused">${refusal}</p>`;
  if (!comparison) return html`<p class="hint">Comparing…</p>`;
  const opened = open ? comparison.cases.find((c) => c.caseId === open.caseId) : undefined;
  return html`<div class="compared" data-testid="comparison">
    <${Summary} comparison=${comparison} />
    <table class="task-list case-list" data-testid="cases">
      <thead>
        <tr><th>case</th><th>change</th><th>A</th><th>B</th><th>score Δ</th><th>cost Δ</th><th>scorers changed</th></tr>
      </thead>
      <tbody>
        ${[...comparison.cases].sort(byChange).map(
          (c) => html`<tr
            key=${c.caseId}
            class=${`change-${c.change} ${c.caseId === open?.caseId ? 'selected' : ''}`}
            onClick=${() => setOpen({ caseId: c.caseId, side: firstSide(c) })}
            title=${c.reason}
            data-testid="case-row"
            data-case=${c.caseId}
            data-change=${c.change}
          >
            <td class="id">${c.caseId}</td>
            <td><span class=${`change ${c.change}`}>${c.change}</span></td>
            <td>${c.a ? html`<span class=${`status ${c.a.status}`}>${c.a.status}</span>` : '–'}</td>
            <td>${c.b ? html`<span class=${`status ${c.b.status}`}>${c.b.status}</span>` : '–'}</td>
            <td>${c.scoreDelta === undefined ? '' : signed(c.scoreDelta)}</td>
            <td>${c.costDeltaUsd === undefined ? '' : signedCost(c.costDeltaUsd)}</td>
            <td class="goal"><div>${changedScorers(c).join(', ')}</div></td>
          </tr>`,
        )}
      </tbody>
    </table>
    ${
      opened && open
        ? html`<${OpenCase}
            key=${`${open.caseId}|${open.side}`}
            api=${api}
            comparison=${comparison}
            compared=${opened}
            side=${open.side}
            onSide=${(side: 'a' | 'b') => setOpen({ caseId: opened.caseId, side })}
            onOpenTask=${props.onOpenTask}
          />`
        : html`<p class="hint">Pick a case to see its scores and its timeline.</p>`
    }
  </div>`;
}

function Summary(props: { comparison: EvalComparison }) {
  const { a, b, summary } = props.comparison;
  const n = summary.counts;
  return html`<div class="summary" data-testid="comparison-summary" data-verdict=${summary.verdict}>
    <p><strong>B ${b.id}</strong> against <strong>A ${a.id}</strong> on ${b.dataset.name}@${b.dataset.version}: <span class=${`verdict ${summary.verdict.replaceAll(' ', '-')}`} data-testid="verdict">${summary.verdict}</span></p>
    <p class="hint">${summary.explanation}</p>
    <dl>
      <dt>passed</dt><dd>${`${percent(summary.passRate.a)} → ${percent(summary.passRate.b)} (${summary.passed.a} → ${summary.passed.b})`}</dd>
      <dt>mean score</dt><dd data-testid="score-change">${scoreChange(summary.meanScore)}</dd>
      <dt>cost</dt><dd data-testid="cost-change">${costChange(summary.costUsd)}</dd>
      <dt>p50</dt><dd>${`${duration(summary.p50Ms.a)} → ${duration(summary.p50Ms.b)}`}</dd>
      <dt>cases</dt><dd>${`${n.regressed} regressed, ${n.improved} improved, ${n.unchanged} unchanged, ${n.added} added, ${n.removed} removed`}</dd>
    </dl>
  </div>`;
}

/**
 * A case opened: its scorers in A and B, and the timeline of one side's run (a live task the server knows opens in the
 * task view too).
 */
function OpenCase(props: {
  api: Api;
  comparison: EvalComparison;
  compared: CaseComparison;
  side: 'a' | 'b';
  onSide: (side: 'a' | 'b') => void;
  onOpenTask: (taskId: string) => void;
}) {
  const { api, comparison, compared, side } = props;
  const experiment = comparison[side];
  const run = compared[side];
  const [trace, setTrace] = useState<Trace | undefined>(undefined);
  const [refusal, setRefusal] = useState<string | undefined>(undefined);
  // A live case's task opens in the task view only if the server knows it: `troupe eval run --mode live` runs its
  // tasks in the CLI's own process, and the experiment keeps their events (the timeline below) but no server does.
  const liveTask = experiment.mode === 'live' ? run?.taskId : undefined;
  const [taskOnServer, setTaskOnServer] = useState<string | undefined>(undefined);
  useEffect(() => {
    api
      .get<Trace>(`/v1/evals/experiments/${ENC(experiment.id)}/cases/${ENC(compared.caseId)}/trace`)
      .then(setTrace, (e: unknown) => setRefusal(e instanceof Error ? e.message : String(e)));
  }, [api, experiment.id, compared.caseId]);
  useEffect(() => {
    setTaskOnServer(undefined);
    if (!liveTask) return;
    api.get(`/v1/tasks/${ENC(liveTask)}`).then(
      () => setTaskOnServer(liveTask),
      () => undefined,
    );
  }, [api, liveTask]);
  return html`<div class="open-case" data-testid="open-case" data-case=${compared.caseId} data-side=${side}>
    <h3>${compared.caseId} <span class=${`change ${compared.change}`}>${compared.change}</span></h3>
    <p class="hint">${compared.reason}</p>
    <table class="task-list scorer-list" data-testid="case-scorers">
      <thead><tr><th>scorer</th><th>A</th><th>B</th><th>why (B, else A)</th></tr></thead>
      <tbody>
        ${compared.scorers.map(
          (s) => html`<tr data-testid="case-scorer" data-scorer=${s.scorer}>
            <td>${s.scorer}</td>
            <td class=${s.a ? (s.a.pass ? 'ok' : 'bad') : ''}>${s.a ? s.a.value.toFixed(2) : '–'}</td>
            <td class=${s.b ? (s.b.pass ? 'ok' : 'bad') : ''}>${s.b ? s.b.value.toFixed(2) : '–'}</td>
            <td class="goal"><div>${(s.b ?? s.a)?.reason ?? ''}</div></td>
          </tr>`,
        )}
      </tbody>
    </table>
    <div class="sides">
      ${(['a', 'b'] as const).map((s) =>
        compared[s]
          ? html`<button class=${`small ${s === side ? '' : 'quiet'}`} onClick=${() => props.onSide(s)} data-testid=${`case-side-${s}`}>${s.toUpperCase()}’s run (${comparison[s].id})</button>`
          : null,
      )}
      ${
        taskOnServer && taskOnServer === liveTask
          ? html`<button class="link" onClick=${() => props.onOpenTask(taskOnServer)} data-testid="case-open-task">open task ${taskOnServer}</button>`
          : null
      }
    </div>
    ${run?.error ? html`<p class="bad">error: ${run.error}</p>` : null}
    ${
      refusal
        ? html`<p class="hint" data-testid="case-no-timeline">${refusal}</p>`
        : trace
          ? html`<${Timeline} trace=${trace} />`
          : html`<p class="hint">Loading its timeline…</p>`
    }
  </div>`;
}
