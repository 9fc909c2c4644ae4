import { html } from 'htm/preact';
import { useEffect, useState } from 'preact/hooks';
import { may } from './access.ts';
import type { Api, TaskOrigin, TaskView, TokenInfo } from './client.ts';
import { TaskLink } from './familyLink.ts';
import { RetryKey } from './retryKey.ts';
import { restartChoice } from './stepChoice.ts';
import type { Trace } from './timeline.ts';
import { useRequest } from './useRequest.ts';

/** What `POST /v1/tasks/{id}/restart` and `…/fork` answer: the new task, and where it came from. */
export interface Started {
  taskId: string;
  origin: TaskOrigin;
}

/**
 * **Restart from a step**, on a failed or cancelled task: a new task linked to this one (`origin`), which reuses the
 * outputs of the steps before the chosen one and runs on from it (`POST /v1/tasks/{id}/restart`). The chooser starts
 * at the step that failed. Offered only to a token that may submit on the pipeline.
 */
export function RestartForm(props: {
  api: Api;
  task: TaskView;
  trace: Trace | undefined;
  who: TokenInfo | undefined;
  onOpen: (taskId: string) => void;
  onRefused: () => void;
}) {
  const { api, task } = props;
  const request = useRequest(props.onRefused);
  const trace = props.trace?.taskId === task.taskId ? props.trace : undefined;
  const choice = trace ? restartChoice(trace) : { steps: [], preset: undefined };
  const [from, setFrom] = useState<string | undefined>(undefined);
  const [started, setStarted] = useState<Started | undefined>(undefined);
  // One per task shown: a retry of a restart whose answer was lost makes no second task.
  const [retry, setRetry] = useState(() => new RetryKey());
  useEffect(() => {
    setFrom(undefined);
    setStarted(undefined);
    setRetry(new RetryKey());
    request.clear();
  }, [task.taskId]);
  const allowed = may(props.who, 'submit', task.pipeline);
  if (task.status !== 'failed' && task.status !== 'cancelled') return null;
  if (!allowed && !request.refusal) return null;
  const step = from ?? choice.preset;

  const restart = async () => {
    if (!step) return;
    const body = { from: step };
    const answer = await request.run('Restart', () =>
      retry.send(body, (key) =>
        api.post<Started>(`/v1/tasks/${task.taskId}/restart`, body, { 'idempotency-key': key }),
      ),
    );
    if (answer) setStarted(answer);
  };
  return html`<div class="restart" data-testid="restart-form">
    <label
      >Restart from
      <select
        value=${step ?? ''}
        disabled=${!allowed || choice.steps.length === 0}
        onChange=${(e: Event) => setFrom((e.target as HTMLSelectElement).value)}
        data-testid="restart-step"
      >
        ${choice.steps.map((s) => html`<option value=${s}>${s}${s === choice.preset ? ' (where it stopped)' : ''}</option>`)}
      </select>
    </label>
    <button disabled=${request.busy || !allowed || !step} onClick=${restart} data-testid="restart">Restart</button>
    <span class="hint control-note">a new task: the steps before it are not run again, their outputs are reused</span>
    ${
      started
        ? html`<p class="started" data-testid="restarted">Started <${TaskLink} taskId=${started.taskId} onOpen=${props.onOpen} testId="new-task" />, a restart of this task from ${started.origin.step}.</p>`
        : null
    }
    ${request.refusal ? html`<p class="bad refusal" role="alert" data-testid="restart-refused">${request.refusal}</p>` : null}
  </div>`;
}
