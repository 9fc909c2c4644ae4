import { html } from 'htm/preact';
import { useCallback, useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { may } from './access.ts';
import type { Api, Session, SessionHead, TaskView, TokenInfo } from './client.ts';
import { count, since } from './format.ts';
import { useLiveEvents } from './liveEvents.ts';
import { TaskOutput } from './output.ts';
import { debounced, ENDED } from './taskEnds.ts';
import { Timeline, type Trace } from './timeline.ts';

/**
 * The pipeline's sessions, newest first (`GET /v1/sessions?pipeline=`), each opened on a click, and **New session**
 * (`POST /v1/sessions`) for a token that may submit on the pipeline.
 */
export function SessionList(props: {
  api: Api;
  pipeline: string;
  who: TokenInfo | undefined;
  selected: string | undefined;
  onOpen: (id: string) => void;
  onError: (e: unknown) => void;
}) {
  const { api, pipeline, onError } = props;
  const [sessions, setSessions] = useState<SessionHead[] | undefined>(undefined);
  const [opening, setOpening] = useState(false);
  /** The latest list asked for: a list that answers after a later one (another pipeline's, chosen before) is dropped. */
  const reads = useRef(0);
  const load = useCallback(async () => {
    if (!pipeline) return;
    const read = ++reads.current;
    const list = await api.get<{ sessions: SessionHead[] }>(`/v1/sessions?pipeline=${pipeline}`);
    if (read === reads.current) setSessions(list.sessions);
  }, [api, pipeline]);
  useEffect(() => {
    setSessions(undefined);
    void load().catch(onError);
  }, [load, onError]);
  // A turn anyone sends moves its session to the top: a new task of the pipeline is the sign.
  const reload = useMemo(() => debounced(() => void load().catch(onError), 500), [load, onError]);
  useLiveEvents((event) => {
    if (event.kind === 'task.accepted' && event.pipeline === pipeline) reload();
  });

  const open = async () => {
    setOpening(true);
    try {
      const session = await api.post<Session>('/v1/sessions', { pipeline });
      await load();
      props.onOpen(session.id);
    } catch (error) {
      onError(error);
    } finally {
      setOpening(false);
    }
  };
  return html`<div class="session-list">
    <div class="panel-head">
      <h2>Sessions</h2>
      ${
        pipeline && may(props.who, 'submit', pipeline)
          ? html`<button class="small" disabled=${opening} onClick=${open} data-testid="new-session">New session</button>`
          : null
      }
    </div>
    ${
      sessions === undefined
        ? html`<p class="hint">Loading…</p>`
        : sessions.length === 0
          ? html`<p class="hint">No sessions of ${pipeline} yet. A session is a conversation: each message runs as a task that sees the earlier ones.</p>`
          : html`<ul class="sessions" data-testid="sessions">
              ${sessions.map(
                (s) => html`<li key=${s.id}>
                  <button
                    class=${`session-row${s.id === props.selected ? ' selected' : ''}`}
                    onClick=${() => props.onOpen(s.id)}
                    data-testid="session-row"
                    data-session=${s.id}
                  >
                    <span class="id">${s.id}</span>
                    <span class="hint">by ${s.createdBy} · ${since(s.updatedAt)} ago</span>
                  </button>
                </li>`,
              )}
            </ul>`
    }
  </div>`;
}

/**
 * One session: its turns in order, each message with how its task ended and its output, the turn under way followed
 * live with its timeline, and a box to continue the conversation (`POST /v1/sessions/{id}/messages`).
 */
export function SessionView(props: {
  api: Api;
  id: string;
  who: TokenInfo | undefined;
  onOpenTask: (taskId: string) => void;
  onSent: (task: TaskView) => void;
  onError: (e: unknown) => void;
}) {
  const { api, id, onError } = props;
  const [session, setSession] = useState<Session | undefined>(undefined);
  const [trace, setTrace] = useState<Trace | undefined>(undefined);
  /** The latest read asked for: an answer to an earlier one that comes after it is older news, and dropped. */
  const reads = useRef(0);
  const load = useCallback(async () => {
    const read = ++reads.current;
    const loaded = await api.get<Session>(`/v1/sessions/${id}`);
    const last = loaded.turns.at(-1);
    // The last turn is followed live while it runs; its timeline stays once it has ended, until the next message.
    const followed = last
      ? await api.get<Trace>(`/v1/tasks/${last.taskId}/trace`).catch(() => undefined)
      : undefined;
    if (read !== reads.current) return;
    setSession(loaded);
    setTrace(followed);
  }, [api, id]);
  useEffect(() => {
    setSession(undefined);
    setTrace(undefined);
    void load().catch(onError);
  }, [load, onError]);
  const reload = useMemo(() => debounced(() => void load().catch(onError), 250), [load, onError]);
  // A turn's task is `<session>-<n>-<random>` (docs/gateway.md, "Sessions"): known by its id even before the session
  // read back lists it, so a turn that ends before that read is not missed.
  useLiveEvents((event) => {
    if (event.taskId.startsWith(`${id}-`)) reload();
  });

  if (!session) return html`<p>Loading session ${id}…</p>`;
  const last = session.turns.at(-1);
  const running = last !== undefined && !ENDED.has(last.status);
  return html`<div class="session" data-testid="session" data-session=${session.id}>
    <h3>Session ${session.id} <span class="hint">· ${session.pipeline} · opened by ${session.createdBy}</span></h3>
    ${session.summary ? html`<p class="hint" data-testid="session-summary">Summed up for later turns: ${count(session.summary.turns, 'earlier turn')}.</p>` : null}
    ${session.turns.length === 0 ? html`<p class="hint">No messages yet: write the first goal below.</p>` : null}
    <ol class="turns">
      ${session.turns.map(
        (
          turn,
          i,
        ) => html`<li class="turn" key=${turn.taskId} data-testid="turn" data-task=${turn.taskId} data-status=${turn.status}>
          <div class="turn-head">
            <span class="turn-no">${i + 1}</span>
            <span class="turn-goal">${turn.goal}</span>
            <span class=${`status ${turn.status}`}>${turn.status}</span>
            <button class="link" onClick=${() => props.onOpenTask(turn.taskId)} data-testid="turn-task">${turn.taskId}</button>
          </div>
          ${turn.output !== undefined ? html`<${TaskOutput} output=${turn.output} />` : null}
          ${turn.failure ? html`<p class="bad">${turn.failure.reason}: ${turn.failure.message}</p>` : null}
        </li>`,
      )}
    </ol>
    ${running && trace?.taskId === last?.taskId ? html`<div class="following" data-testid="following"><${Timeline} trace=${trace} /></div>` : null}
    ${
      may(props.who, 'submit', session.pipeline)
        ? html`<${ContinueForm}
            api=${api}
            session=${session}
            running=${running}
            onSent=${(task: TaskView) => {
              props.onSent(task);
              void load().catch(onError);
            }}
          />`
        : null
    }
  </div>`;
}

function ContinueForm(props: {
  api: Api;
  session: Session;
  running: boolean;
  onSent: (task: TaskView) => void;
}) {
  const [goal, setGoal] = useState('');
  const [sending, setSending] = useState(false);
  const [refusal, setRefusal] = useState<string | undefined>(undefined);
  const first = props.session.turns.length === 0;
  return html`<form
    class="continue-form"
    onSubmit=${async (e: Event) => {
      e.preventDefault();
      if (!goal.trim()) return;
      setSending(true);
      setRefusal(undefined);
      try {
        props.onSent(
          await props.api.post<TaskView>(`/v1/sessions/${props.session.id}/messages`, { goal: goal.trim() }),
        );
        setGoal('');
      } catch (error) {
        setRefusal(error instanceof Error ? error.message : String(error));
      } finally {
        setSending(false);
      }
    }}
  >
    <label for="session-goal">${first ? 'First message' : 'Continue the conversation'}</label>
    <textarea
      id="session-goal"
      rows="2"
      placeholder=${first ? 'What should it achieve?' : 'Now also…'}
      value=${goal}
      onInput=${(e: Event) => setGoal((e.target as HTMLTextAreaElement).value)}
      data-testid="session-goal"
    ></textarea>
    <div class="actions">
      <button type="submit" disabled=${sending || props.running || !goal.trim()} data-testid="session-send">Send</button>
      ${props.running ? html`<span class="hint">The last turn is still running; its result goes with the next message.</span>` : null}
    </div>
    ${refusal ? html`<p class="bad" role="alert" data-testid="session-refused">${refusal}</p>` : null}
  </form>`;
}
