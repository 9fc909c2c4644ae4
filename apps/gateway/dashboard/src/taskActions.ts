import { html } from 'htm/preact';
import { useEffect, useState } from 'preact/hooks';
import { may } from './access.ts';
import { type Api, ApiError, type TaskView, type TokenInfo } from './client.ts';
import { ENDED } from './taskEnds.ts';
import type { Trace } from './timeline.ts';

/** The trace's part a re-run needs: the task's input, whole unless `inputCut` says it could not be read back. */
type WithInput = Trace & { input?: Record<string, unknown>; inputCut?: unknown };

/**
 * What can be done to the task shown: **Cancel** while it runs (asked twice, then `POST /v1/tasks/{id}/cancel`), and
 * **Re-run** once it has ended — a new task of the same pipeline with the same goal, input and labels, submitted as
 * `POST /v1/pipelines/{name}/tasks` submits any task, so it starts on the pipeline's newest version. Each is offered
 * only to a token that may submit on the pipeline; a refusal shows the gateway's own message.
 */
export function TaskActions(props: {
  api: Api;
  task: TaskView;
  trace: Trace | undefined;
  who: TokenInfo | undefined;
  /** The task was cancelled: read it again. */
  onCancelled: (taskId: string) => void;
  /** The re-run was submitted: open it. */
  onRerun: (task: TaskView) => void;
  /** A refusal on the ground of the token: read what the token may do again. */
  onRefused: () => void;
}) {
  const { api, task } = props;
  const trace = props.trace as WithInput | undefined;
  const [asking, setAsking] = useState(false);
  const [busy, setBusy] = useState(false);
  const [refusal, setRefusal] = useState<string | undefined>(undefined);
  // Another task shown starts with nothing asked and nothing refused.
  useEffect(() => {
    setAsking(false);
    setRefusal(undefined);
  }, [task.taskId]);
  const allowed = may(props.who, 'submit', task.pipeline);
  // A refusal stays in view after the buttons go: it says why they went.
  if (!allowed && !refusal) return null;

  const act = async (what: string, run: () => Promise<void>) => {
    setBusy(true);
    setRefusal(undefined);
    try {
      await run();
    } catch (error) {
      setRefusal(`${what}: ${error instanceof Error ? error.message : String(error)}`);
      if (error instanceof ApiError && (error.status === 401 || error.status === 403)) props.onRefused();
    } finally {
      setBusy(false);
      setAsking(false);
    }
  };
  const cancel = () =>
    act('The gateway did not cancel it', async () => {
      await api.post(`/v1/tasks/${task.taskId}/cancel`, { reason: 'cancelled from the dashboard' });
      props.onCancelled(task.taskId);
    });
  // The input comes from the trace, which reads a stored large input back whole; a cut one cannot be sent again.
  const input = trace?.taskId === task.taskId ? trace.input : undefined;
  const inputCut = trace?.taskId === task.taskId && trace.inputCut !== undefined;
  const rerun = () =>
    act('The gateway did not take the re-run', async () => {
      const { session: _session, ...labels } = task.metadata ?? {};
      const body = {
        goal: task.goal,
        ...(input === undefined ? {} : { input }),
        // A re-run is a task of its own, not a turn of the session the first one belonged to.
        metadata: { ...labels, rerunOf: task.taskId },
      };
      props.onRerun(await api.post<TaskView>(`/v1/pipelines/${task.pipeline}/tasks`, body));
    });

  const running = !ENDED.has(task.status);
  return html`<div class="task-actions" data-testid="task-actions">
    ${
      !allowed
        ? null
        : running
          ? asking
            ? html`<span class="confirm">Cancel ${task.taskId}? Its current step stops.</span>
              <button class="deny" disabled=${busy} onClick=${cancel} data-testid="cancel-confirm">Cancel task</button>
              <button class="quiet" disabled=${busy} onClick=${() => setAsking(false)} data-testid="cancel-keep">Keep running</button>`
            : html`<button class="deny" onClick=${() => setAsking(true)} data-testid="cancel">Cancel</button>`
          : html`<button
              disabled=${busy || !trace || trace.taskId !== task.taskId || inputCut}
              title=${inputCut ? 'its input is no longer stored whole, so it cannot be sent again' : ''}
              onClick=${rerun}
              data-testid="rerun"
            >Re-run</button>
            <span class="hint">as a new task with the same goal and input, on the pipeline's newest version${task.version ? ` (this one ran on ${task.version.slice(0, 12)})` : ''}</span>`
    }
    ${refusal ? html`<p class="bad refusal" role="alert" data-testid="action-refused">${refusal}</p>` : null}
  </div>`;
}
