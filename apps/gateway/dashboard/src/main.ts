import { html } from 'htm/preact';
import { render } from 'preact';
import { useCallback, useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { may } from './access.ts';
import {
  Api,
  ApiError,
  type HumanRequest,
  type Pipeline,
  type TaskView,
  type TokenInfo,
  type TroupeEvent,
} from './client.ts';
import { DatasetAdd } from './datasetAdd.ts';
import { scoreOfEvent, scoreTitle, type TaskScore } from './evalShapes.ts';
import { ExperimentsView } from './experiments.ts';
import { TaskFiles } from './files.ts';
import { firstRuns } from './forkEdits.ts';
import { ForkForm } from './forkForm.ts';
import { cost, duration, since, tokens } from './format.ts';
import { type Busy, FlowGraph, type Move } from './graph.ts';
import { liveEvents } from './liveEvents.ts';
import { TaskOutput } from './output.ts';
import { expiryText } from './requestExpiry.ts';
import { RestartForm } from './restartForm.ts';
import { SessionList, SessionView } from './sessions.ts';
import { TaskSteering } from './steering.ts';
import { TaskActions } from './taskActions.ts';
import { debounced, ENDED } from './taskEnds.ts';
import { originLabel, TaskFamily } from './taskFamily.ts';
import { type StepTools, type StepTrace, Timeline, type Trace } from './timeline.ts';
import './style.css';

const api = new Api();

function App() {
  const [needToken, setNeedToken] = useState(false);
  const [pipelines, setPipelines] = useState<Pipeline[]>([]);
  const [pipeline, setPipeline] = useState<string>('');
  const [tasks, setTasks] = useState<Map<string, TaskView>>(new Map());
  /** The online scores (`eval.scored`) of the tasks listed, by task. */
  const [scores, setScores] = useState<Map<string, TaskScore>>(new Map());
  const [selected, setSelected] = useState<string | undefined>(undefined);
  const [trace, setTrace] = useState<Trace | undefined>(undefined);
  const [requests, setRequests] = useState<HumanRequest[]>([]);
  const [moves, setMoves] = useState<Move[]>([]);
  const [busy, setBusy] = useState<Map<string, Busy & { until: number }>>(new Map());
  const [live, setLive] = useState(false);
  const [error, setError] = useState<string | undefined>(undefined);
  /** What the token may do (absent from a gateway without `GET /v1/token`: everything is offered). */
  const [who, setWho] = useState<TokenInfo | undefined>(undefined);
  /** The session shown in place of a task's timeline. */
  const [openSession, setOpenSession] = useState<string | undefined>(undefined);
  /** The tasks (the flow, its tasks and sessions) or the experiments stored and their comparison. */
  const [view, setView] = useState<'tasks' | 'experiments'>('tasks');
  const selectedRef = useRef<string | undefined>(undefined);
  selectedRef.current = selected;
  /** The step each task was last at, to draw the hand-over to its next one. */
  const lastStep = useRef(new Map<string, string>());
  /**
   * The tasks a person holds, each with what its step would show but for the hold (what it showed before, or what the
   * call it was finishing said since): their step stays lit as paused, and shows that again once resumed.
   */
  const held = useRef(new Map<string, (Busy & { until: number }) | undefined>());
  const busyNow = useRef(busy);
  busyNow.current = busy;

  const failed = useCallback((e: unknown) => {
    if (e instanceof ApiError && e.status === 401) setNeedToken(true);
    else setError(e instanceof Error ? e.message : String(e));
  }, []);

  const loadTasks = useCallback(async () => {
    const list = await api.get<{ tasks: TaskView[] }>('/v1/tasks?limit=100');
    setTasks(new Map(list.tasks.map((t) => [t.taskId, t])));
    // Their online scores, published since the oldest of them was made (a gateway without evals has none).
    const oldest = list.tasks
      .map((t) => t.createdAt ?? '')
      .reduce((a, b) => (b && (!a || b < a) ? b : a), '');
    if (!oldest) return;
    const found = await api
      .get<{ scores: TaskScore[] }>(`/v1/evals/scores?since=${encodeURIComponent(oldest)}`)
      .catch(() => ({ scores: [] }));
    setScores((known) => new Map([...found.scores.map((x) => [x.taskId, x] as const), ...known]));
  }, []);
  const loadRequests = useCallback(async () => {
    setRequests((await api.get<{ requests: HumanRequest[] }>('/v1/approvals')).requests);
  }, []);
  const loadWho = useCallback(async () => {
    setWho(await api.get<TokenInfo>('/v1/token').catch(() => undefined));
  }, []);
  const loadTrace = useCallback(async (taskId: string) => {
    try {
      const loaded = await api.get<Trace>(`/v1/tasks/${taskId}/trace`);
      if (selectedRef.current === taskId) setTrace(loaded);
    } catch (e) {
      // A task just submitted has no record until a coordinator takes it; its first event loads its trace again.
      if (!(e instanceof ApiError && e.status === 404)) throw e;
    }
  }, []);

  // Everything a page needs at first; a 401 asks for a token.
  const start = useCallback(async () => {
    try {
      const list = await api.get<{ pipelines: Pipeline[] }>('/v1/pipelines');
      setPipelines(list.pipelines);
      setPipeline((current) => current || list.pipelines[0]?.name || '');
      setNeedToken(false);
      setError(undefined);
      await Promise.all([loadTasks(), loadRequests(), loadWho()]);
    } catch (e) {
      failed(e);
    }
  }, [failed, loadTasks, loadRequests, loadWho]);

  useEffect(() => {
    void start();
  }, [start]);

  // Refreshes that events ask for, each debounced.
  const refresh = useMemo(() => {
    const perTask = new Map<string, () => void>();
    return {
      task: (taskId: string) => {
        let run = perTask.get(taskId);
        if (!run) {
          run = debounced(async () => {
            try {
              const view = await api.get<TaskView>(`/v1/tasks/${taskId}`);
              setTasks((all) => new Map(all).set(taskId, view));
            } catch (e) {
              failed(e);
            }
          }, 250);
          perTask.set(taskId, run);
        }
        run();
      },
      requests: debounced(() => void loadRequests().catch(failed), 200),
      // A request's asker marks it held (or writes its new expiresAt) after it hears task.paused (task.resumed), with
      // no event of its own: the list is read again once that write has had time to land.
      requestsLate: debounced(() => void loadRequests().catch(failed), 2_000),
      trace: debounced(() => {
        const taskId = selectedRef.current;
        if (taskId) void loadTrace(taskId).catch(failed);
      }, 250),
    };
  }, [failed, loadRequests, loadTrace]);

  // The live flow: every task's events, as they are stored.
  useEffect(() => {
    if (needToken) return;
    const source = api.events('/v1/events', (event) => onEvent(event), setLive);
    return () => source.close();
    // One stream for the page's life (per token); onEvent reads the latest state through refs and setters.
  }, [needToken]);

  function onEvent(event: TroupeEvent) {
    liveEvents.emit(event);
    if (event.kind === 'eval.scored') {
      const score = scoreOfEvent(event);
      setScores((known) => (known.has(event.taskId) ? known : new Map(known).set(event.taskId, score)));
      return;
    }
    refresh.task(event.taskId);
    if (event.taskId === selectedRef.current) refresh.trace();
    if (
      event.kind.startsWith('approval.') ||
      event.kind.startsWith('human.') ||
      event.kind.startsWith('task.')
    ) {
      refresh.requests();
    }
    if (event.kind === 'task.paused' || event.kind === 'task.resumed') refresh.requestsLate();
    const step = typeof event.data.step === 'string' ? event.data.step : undefined;
    if (event.kind === 'step.started' && step) {
      const from = lastStep.current.get(event.taskId);
      lastStep.current.set(event.taskId, step);
      if (from && from !== step) {
        const move: Move = {
          key: `${event.id}`,
          from,
          to: step,
          rework: Number(event.data.round ?? 1) > 1 && from !== step,
        };
        setMoves((all) => [...all.slice(-20), move]);
        setTimeout(() => setMoves((all) => all.filter((m) => m !== move)), 1_500);
      }
    }
    if (event.kind === 'task.completed' || event.kind === 'task.failed' || event.kind === 'task.cancelled') {
      const from = lastStep.current.get(event.taskId);
      if (from) {
        const move: Move = { key: event.id, from, to: 'end', rework: false };
        setMoves((all) => [...all.slice(-20), move]);
        setTimeout(() => setMoves((all) => all.filter((m) => m !== move)), 1_500);
      }
      lastStep.current.delete(event.taskId);
      held.current.delete(event.taskId);
      setBusy((all) => {
        const next = new Map(all);
        next.delete(event.taskId);
        return next;
      });
      return;
    }
    if (event.kind === 'task.paused') {
      const step = lastStep.current.get(event.taskId);
      if (!held.current.has(event.taskId)) held.current.set(event.taskId, busyNow.current.get(event.taskId));
      if (step) {
        setBusy((all) =>
          new Map(all).set(event.taskId, { step, what: 'person', label: 'paused', until: Date.now() }),
        );
      }
      return;
    }
    if (event.kind === 'task.resumed' && event.data.after === 'pause') {
      const before = held.current.get(event.taskId);
      held.current.delete(event.taskId);
      setBusy((all) => {
        const next = new Map(all);
        if (before) next.set(event.taskId, { ...before, until: Date.now() + 2_000 });
        else next.delete(event.taskId);
        return next;
      });
      return;
    }
    const doing = busyOf(event, lastStep.current.get(event.taskId));
    if (!doing) return;
    const lit = { ...doing, until: Date.now() + 2_000 };
    if (held.current.has(event.taskId)) held.current.set(event.taskId, lit);
    else setBusy((all) => new Map(all).set(event.taskId, lit));
  }

  // Lit nodes go dark once nothing has been heard of them for a while.
  useEffect(() => {
    const timer = setInterval(() => {
      setBusy((all) => {
        const now = Date.now();
        const kept = [...all].filter(([, b]) => b.until > now || b.what === 'person');
        return kept.length === all.size ? all : new Map(kept);
      });
    }, 500);
    return () => clearInterval(timer);
  }, []);

  useEffect(() => {
    setTrace(undefined);
    if (selected) void loadTrace(selected).catch(failed);
  }, [selected, loadTrace, failed]);

  const signIn = (token: string) => {
    api.setToken(token);
    void start();
  };
  const signOut = () => {
    api.setToken(null);
    setNeedToken(true);
  };
  const submitted = (task: TaskView) => {
    setTasks((all) => new Map(all).set(task.taskId, task));
    setSelected(task.taskId);
    setOpenSession(undefined);
  };
  const selectTask = (taskId: string) => {
    setSelected(taskId);
    setOpenSession(undefined);
  };
  /** Opens a task a link names (a restart or fork just started, or one of the family), read afresh. */
  const openTask = (taskId: string) => {
    setView('tasks');
    selectTask(taskId);
    refresh.task(taskId);
  };
  if (needToken) return html`<${TokenPrompt} onToken=${signIn} />`;
  const current = pipelines.find((p) => p.name === pipeline);
  const shown = [...tasks.values()]
    .filter((t) => !pipeline || t.pipeline === pipeline)
    .sort((a, b) => (b.createdAt ?? '').localeCompare(a.createdAt ?? ''));
  const selectedTask = selected ? tasks.get(selected) : undefined;
  const busyHere = [...busy.values()].filter((b) => current?.steps.includes(b.step));
  // Fork from a step: offered on each step of an ended task's own timeline, to a token that may submit.
  const forkable =
    selectedTask !== undefined &&
    trace?.taskId === selectedTask.taskId &&
    ENDED.has(selectedTask.status) &&
    may(who, 'submit', selectedTask.pipeline);
  const forkAt = forkable && trace ? firstRuns(trace.steps) : undefined;
  const forkTools: StepTools | undefined =
    forkAt && trace
      ? (step: StepTrace) =>
          forkAt.has(step.stepId)
            ? html`<${ForkForm} key=${`${trace.taskId}:${step.stepId}`} api=${api} task=${selectedTask} trace=${trace} step=${step} onOpen=${openTask} onRefused=${() => void loadWho()} />`
            : null
      : undefined;
  return html`<div class="page">
    <header>
      <h1>Troupe</h1>
      <nav class="views">
        ${(['tasks', 'experiments'] as const).map((v) => html`<button class=${`small ${view === v ? '' : 'quiet'}`} onClick=${() => setView(v)} data-testid=${`view-${v}`}>${v === 'tasks' ? 'Tasks' : 'Experiments'}</button>`)}
      </nav>
      <label
        >pipeline
        <select value=${pipeline} onChange=${(e: Event) => setPipeline((e.target as HTMLSelectElement).value)} data-testid="pipeline">
          ${pipelines.map((p) => html`<option value=${p.name}>${p.name}</option>`)}
        </select>
      </label>
      <span class=${`live ${live ? 'on' : 'off'}`} data-testid="live">${live ? 'live' : 'reconnecting…'}</span>
      ${api.token ? html`<button class="link" onClick=${signOut}>sign out</button>` : null}
    </header>
    ${error ? html`<p class="error" role="alert">${error} <button class="link" onClick=${() => setError(undefined)}>dismiss</button></p>` : null}
    ${view === 'experiments' ? html`<${ExperimentsView} api=${api} onOpenTask=${openTask} onError=${failed} />` : null}
    <main hidden=${view !== 'tasks'}>
      <section class="graph">
        ${current ? html`<p class="description">${current.description ?? ''}</p><${FlowGraph} pipeline=${current} moves=${moves} busy=${busyHere} />` : html`<p>No pipeline is loaded.</p>`}
      </section>
      <section class="submit">
        <${SubmitForm} pipeline=${pipeline} onSubmitted=${submitted} onError=${failed} />
      </section>
      <section class="approvals">
        <h2>Waiting for a person</h2>
        <${Approvals} requests=${requests} who=${who} onDone=${() => void loadRequests().catch(failed)} onError=${failed} />
      </section>
      <section class="tasks">
        <h2>Tasks</h2>
        <${TaskList} tasks=${shown} scores=${scores} selected=${selected} onSelect=${selectTask} />
      </section>
      <section class="detail">
        ${
          openSession
            ? html`<${SessionView} key=${openSession} api=${api} id=${openSession} who=${who} onOpenTask=${selectTask} onSent=${(task: TaskView) => setTasks((all) => new Map(all).set(task.taskId, task))} onError=${failed} />`
            : selected
              ? html`${
                  selectedTask
                    ? html`<${TaskFamily} task=${selectedTask} tasks=${[...tasks.values()]} onOpen=${openTask} />
                      <${TaskActions} api=${api} task=${selectedTask} trace=${trace} who=${who} onCancelled=${refresh.task} onRerun=${submitted} onRefused=${() => void loadWho()} />
                      <${DatasetAdd} api=${api} task=${selectedTask} who=${who} onRefused=${() => void loadWho()} />
                      <${TaskSteering} api=${api} task=${selectedTask} who=${who} onChanged=${refresh.task} onRefused=${() => void loadWho()} />
                      <${RestartForm} api=${api} task=${selectedTask} trace=${trace} who=${who} onOpen=${openTask} onRefused=${() => void loadWho()} />`
                    : null
                }
                ${trace ? html`<${Timeline} trace=${trace} stepTools=${forkTools} paused=${selectedTask?.taskId === trace.taskId && selectedTask.paused !== undefined} />` : html`<p>Loading ${selected}…</p>`}
                ${trace?.taskId === selected && trace.output !== undefined ? html`<${TaskOutput} output=${trace.output} />` : null}
                ${selectedTask && ENDED.has(selectedTask.status) ? html`<${TaskFiles} key=${selected} api=${api} taskId=${selected} />` : null}`
              : html`<p class="hint">Pick a task to see its timeline, or a session to see its conversation.</p>`
        }
      </section>
      <section class="sessions-panel">
        <${SessionList} api=${api} pipeline=${pipeline} who=${who} selected=${openSession} onOpen=${setOpenSession} onError=${failed} />
      </section>
    </main>
  </div>`;
}

/** What a step's agent is doing, as the event says. */
function busyOf(event: TroupeEvent, step: string | undefined): Busy | undefined {
  if (!step) return undefined;
  switch (event.kind) {
    case 'llm.request':
      return { step, what: 'model', label: `asking ${String(event.data.model)}` };
    case 'tool.call':
      return { step, what: 'tool', label: `running ${String(event.data.tool)}` };
    case 'approval.requested':
      return { step, what: 'person', label: 'waiting for approval' };
    case 'human.asked':
      return { step, what: 'person', label: 'asking a person' };
    case 'llm.response':
    case 'tool.result':
    case 'approval.decided':
    case 'human.answered':
      return { step, what: 'agent', label: 'working' };
    default:
      return undefined;
  }
}

function TokenPrompt(props: { onToken: (token: string) => void }) {
  const [token, setToken] = useState('');
  return html`<form
    class="token"
    onSubmit=${(e: Event) => {
      e.preventDefault();
      if (token.trim()) props.onToken(token.trim());
    }}
  >
    <h1>Troupe</h1>
    <p>This gateway asks for a token (<code>${'troupe token <name>'}</code> makes one).</p>
    <input type="password" placeholder="trp_…" value=${token} onInput=${(e: Event) => setToken((e.target as HTMLInputElement).value)} data-testid="token" autofocus />
    <button type="submit">Open</button>
  </form>`;
}

function SubmitForm(props: {
  pipeline: string;
  onSubmitted: (task: TaskView) => void;
  onError: (e: unknown) => void;
}) {
  const [goal, setGoal] = useState('');
  const [sending, setSending] = useState(false);
  return html`<form
    class="submit-form"
    onSubmit=${async (e: Event) => {
      e.preventDefault();
      if (!goal.trim() || !props.pipeline) return;
      setSending(true);
      try {
        props.onSubmitted(await api.post<TaskView>(`/v1/pipelines/${props.pipeline}/tasks`, { goal }));
        setGoal('');
      } catch (error) {
        props.onError(error);
      } finally {
        setSending(false);
      }
    }}
  >
    <label for="goal">New task for <strong>${props.pipeline || '…'}</strong></label>
    <textarea id="goal" rows="2" placeholder="What should it achieve?" value=${goal} onInput=${(e: Event) => setGoal((e.target as HTMLTextAreaElement).value)} data-testid="goal"></textarea>
    <button type="submit" disabled=${sending || !goal.trim()} data-testid="submit">Submit</button>
  </form>`;
}

function Approvals(props: {
  requests: HumanRequest[];
  who: TokenInfo | undefined;
  onDone: () => void;
  onError: (e: unknown) => void;
}) {
  if (props.requests.length === 0) return html`<p class="hint">Nothing is waiting.</p>`;
  return html`<ul class="requests">
    ${props.requests.map((r) => html`<${RequestCard} key=${r.id} request=${r} who=${props.who} onDone=${props.onDone} onError=${props.onError} />`)}
  </ul>`;
}

/**
 * One approval or question waiting for a person. Approve, Deny and the answer box are offered only to a token that
 * may decide it (the approve scope on its pipeline, as the gateway requires); any other sees it read-only, told who
 * may decide.
 */
function RequestCard(props: {
  request: HumanRequest;
  who: TokenInfo | undefined;
  onDone: () => void;
  onError: (e: unknown) => void;
}) {
  const r = props.request;
  const [text, setText] = useState('');
  const [busy, setBusy] = useState(false);
  // Its deadline counts down (unless held): the card draws itself again every second.
  const [, setNow] = useState(Date.now());
  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), 1_000);
    return () => clearInterval(timer);
  }, []);
  const send = async (body: Record<string, string>) => {
    setBusy(true);
    try {
      await api.post(`/v1/approvals/${r.id}`, body);
      props.onDone();
    } catch (error) {
      props.onError(error);
    } finally {
      setBusy(false);
    }
  };
  return html`<li class="request" data-testid="request" data-request=${r.id}>
    <div><strong>${r.kind === 'approval' ? `${r.agent} wants to run ${r.tool}` : `${r.agent} asks`}</strong> · ${r.taskId} · <span data-testid="expires">${expiryText(r)}</span></div>
    ${
      !may(props.who, 'approve', r.pipeline)
        ? html`${r.kind === 'approval' ? html`<pre class="args">${r.arguments}</pre>` : null}
          <p class="why">${r.prompt}</p>
          <p class="hint" data-testid="decided-by">${readOnly(r, props.who)}</p>`
        : r.kind === 'approval'
          ? html`<pre class="args">${r.arguments}</pre>
          <p class="why">${r.prompt}</p>
          <div class="actions">
            <button disabled=${busy} onClick=${() => send({ decision: 'allow' })} data-testid="approve">Approve</button>
            <input placeholder="reason to deny" value=${text} onInput=${(e: Event) => setText((e.target as HTMLInputElement).value)} data-testid="reason" />
            <button class="deny" disabled=${busy || !text.trim()} onClick=${() => send({ decision: 'deny', reason: text.trim() })} data-testid="deny">Deny</button>
          </div>`
          : html`<p class="why">${r.prompt}</p>
          <div class="actions">
            <input placeholder="your answer" value=${text} onInput=${(e: Event) => setText((e.target as HTMLInputElement).value)} data-testid="answer-text" />
            <button disabled=${busy || !text.trim()} onClick=${() => send({ answer: text.trim() })} data-testid="answer">Answer</button>
          </div>`
    }
  </li>`;
}

/** Who may decide a request the signed-in token may only read. */
function readOnly(r: HumanRequest, who: TokenInfo | undefined): string {
  const act = r.kind === 'approval' ? 'approve or deny it' : 'answer it';
  return `Read-only: a token with the approve or admin scope on ${r.pipeline} may ${act}${who ? ` (${who.name} has ${who.scopes.join(', ')})` : ''}.`;
}

function TaskList(props: {
  tasks: TaskView[];
  scores: Map<string, TaskScore>;
  selected: string | undefined;
  onSelect: (taskId: string) => void;
}) {
  if (props.tasks.length === 0) return html`<p class="hint">No tasks yet.</p>`;
  // A score column only where a listed task was scored (its pipeline has an `evals:` block).
  const scored = props.tasks.some((t) => props.scores.has(t.taskId));
  return html`<table class="task-list" data-testid="tasks">
    <thead>
      <tr><th>task</th><th>version</th><th>status</th>${scored ? html`<th>score</th>` : null}<th>took</th><th>tokens</th><th>cost</th><th>goal</th></tr>
    </thead>
    <tbody>
      ${props.tasks.map(
        (t) => html`<tr
          key=${t.taskId}
          class=${t.taskId === props.selected ? 'selected' : ''}
          onClick=${() => props.onSelect(t.taskId)}
          data-testid="task-row"
          data-task=${t.taskId}
          data-status=${t.status}
          data-paused=${t.paused ? 'true' : 'false'}
          data-version=${t.version ?? ''}
        >
          <td class="id" title=${t.taskId}><${TaskId} id=${t.taskId} />${t.origin ? html`<span class="origin" data-testid="row-origin">${originLabel(t)}</span>` : null}</td>
          <td class="version" title=${t.version ?? ''}>${t.version?.slice(0, 12) ?? ''}</td>
          <td><span class=${`status ${t.paused ? 'paused' : t.status}`}>${t.paused ? 'paused' : t.status}</span>${where(t) ? html`<span class="at">${where(t)}</span>` : null}</td>
          ${scored ? html`<td><${ScoreCell} score=${props.scores.get(t.taskId)} /></td>` : null}
          <td>${t.createdAt ? (t.status === 'running' || t.status === 'submitted' ? since(t.createdAt) : duration(Date.parse(t.updatedAt ?? t.createdAt) - Date.parse(t.createdAt))) : ''}</td>
          <td>${t.usage ? tokens(t.usage) : ''}</td>
          <td>${t.usage ? cost(t.usage.costUsd) : ''}</td>
          <td class="goal" title=${t.goal}><div>${t.goal}</div></td>
        </tr>`,
      )}
    </tbody>
  </table>`;
}

/** A task's online score: passed or failed, and its mean score; empty for a task not scored. */
function ScoreCell(props: { score: TaskScore | undefined }) {
  const s = props.score;
  if (!s) return null;
  const label = s.error ? 'not scored' : `${s.pass ? 'pass' : 'fail'} ${s.meanScore.toFixed(2)}`;
  return html`<span class=${`score ${s.pass ? 'ok' : 'bad'}`} title=${scoreTitle(s)} data-testid="task-score" data-pass=${String(s.pass)}>${label}</span>`;
}

/**
 * A task id cut in its middle when its column is narrow: its start and its last characters (a session turn's number
 * and random part) stay in view. The whole id is the element's text, so it is selected and copied whole.
 */
function TaskId(props: { id: string }) {
  const tail = props.id.length > 16 ? 8 : 0;
  return html`<span class="cut-id"><span class="head">${props.id.slice(0, props.id.length - tail)}</span>${tail ? html`<span class="tail">${props.id.slice(-tail)}</span>` : null}</span>`;
}

/** Where a running task is and in which round, when its state says more than its status does. */
function where(t: TaskView): string {
  const at = t.state && t.state !== t.status ? `at ${t.state}` : '';
  const round = (t.round ?? 1) > 1 ? `round ${t.round}` : '';
  return [at, round].filter(Boolean).join(' · ');
}

const root = document.getElementById('app');
if (root) render(html`<${App} />`, root);
