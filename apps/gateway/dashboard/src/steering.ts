import { html } from 'htm/preact';
import { useEffect, useState } from 'preact/hooks';
import { may } from './access.ts';
import type { Api, TaskView, TokenInfo } from './client.ts';
import { since } from './format.ts';
import { useRequest } from './useRequest.ts';

/**
 * A running task's steering: **Pause** (the step at work finishes its current model or tool call, then the task is
 * held) or **Resume** when it is held, and **Tell**, a message the agent at work reads before its next model call
 * (`POST /v1/tasks/{id}/pause`, `…/resume`, `…/tell`). Offered only to a token with the approve or admin scope on the
 * task's pipeline, as the gateway requires; each control shows its own refusal beside it.
 */
export function TaskSteering(props: {
  api: Api;
  task: TaskView;
  who: TokenInfo | undefined;
  /** The task's state changed: read it again. */
  onChanged: (taskId: string) => void;
  /** A refusal on the ground of the token: read what the token may do again. */
  onRefused: () => void;
}) {
  const { api, task } = props;
  const hold = useRequest(props.onRefused);
  const tell = useRequest(props.onRefused);
  const [text, setText] = useState('');
  const [reason, setReason] = useState('');
  const [told, setTold] = useState<string | undefined>(undefined);
  /** What the last answered pause or resume said, until the task's view says the same. */
  const [answered, setAnswered] = useState<boolean | undefined>(undefined);
  const paused = task.paused !== undefined;
  useEffect(() => setAnswered(undefined), [paused]);
  // Another task shown starts with nothing told and nothing refused.
  useEffect(() => {
    setTold(undefined);
    setText('');
    setReason('');
    setAnswered(undefined);
    hold.clear();
    tell.clear();
  }, [task.taskId]);
  const allowed = may(props.who, 'approve', task.pipeline);
  const refused = hold.refusal ?? tell.refusal;
  if (task.status !== 'running' || (!allowed && !refused)) return null;
  const held = answered ?? paused;

  const pause = async () => {
    const why = reason.trim();
    const done = await hold.run('Pause', () =>
      api.post(`/v1/tasks/${task.taskId}/pause`, why ? { reason: why } : {}),
    );
    if (done === undefined) return;
    setAnswered(true);
    setReason('');
    props.onChanged(task.taskId);
  };
  const resume = async () => {
    const done = await hold.run('Resume', () => api.post(`/v1/tasks/${task.taskId}/resume`, {}));
    if (done === undefined) return;
    setAnswered(false);
    props.onChanged(task.taskId);
  };
  const send = async (e: Event) => {
    e.preventDefault();
    const message = text.trim();
    if (!message) return;
    const receipt = await tell.run('Tell', () =>
      api.post<{ taskId: string; messageId: string }>(`/v1/tasks/${task.taskId}/tell`, { text: message }),
    );
    if (receipt === undefined) return;
    setTold(receipt.messageId);
    setText('');
  };

  return html`<div class="steering" data-testid="steering" data-paused=${held ? 'true' : 'false'}>
    <div class="hold">
      ${
        held
          ? html`<span class="paused-note" data-testid="paused-note">${pausedNote(task)}</span>
            <button disabled=${hold.busy || !allowed} onClick=${resume} data-testid="resume">Resume</button>`
          : html`<button class="quiet" disabled=${hold.busy || !allowed} onClick=${pause} data-testid="pause">Pause</button>
            <input
              class="pause-reason"
              placeholder="why (optional)"
              value=${reason}
              disabled=${!allowed}
              onInput=${(e: Event) => setReason((e.target as HTMLInputElement).value)}
              data-testid="pause-reason"
            />
            <span class="hint control-note">the step at work finishes its current model or tool call, then the task waits</span>`
      }
      ${hold.refusal ? html`<p class="bad refusal" role="alert" data-testid="hold-refused">${hold.refusal}</p>` : null}
    </div>
    <form class="tell" onSubmit=${send}>
      <textarea
        rows="2"
        placeholder="Tell the agent at work (it reads this before its next model call)"
        value=${text}
        disabled=${!allowed}
        onInput=${(e: Event) => setText((e.target as HTMLTextAreaElement).value)}
        data-testid="tell-text"
      ></textarea>
      <button type="submit" disabled=${tell.busy || !allowed || !text.trim()} data-testid="tell">Tell</button>
      ${told ? html`<p class="hint told-receipt" data-testid="told-receipt">Told: message ${told} is recorded; the timeline shows when an agent reads it.</p>` : null}
      ${tell.refusal ? html`<p class="bad refusal" role="alert" data-testid="tell-refused">${tell.refusal}</p>` : null}
    </form>
  </div>`;
}

/** Who holds the task, since when and why, as its view says. */
function pausedNote(task: TaskView): string {
  const p = task.paused;
  if (!p) return 'Paused';
  return `Paused ${since(p.since)} ago${p.by ? ` by ${p.by}` : ''}${p.reason ? `: ${p.reason}` : ''}`;
}
