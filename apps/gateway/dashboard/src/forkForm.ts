import { html } from 'htm/preact';
import { useState } from 'preact/hooks';
import type { Api, TaskView } from './client.ts';
import { TaskLink } from './familyLink.ts';
import { forkBody, inputText, stepsBefore } from './forkEdits.ts';
import type { Started } from './restartForm.ts';
import { RetryKey } from './retryKey.ts';
import type { StepTrace, Trace } from './timeline.ts';
import { useRequest } from './useRequest.ts';

/**
 * **Fork** from a step of an ended task's timeline: a new task whose history up to that step is this one's, with the
 * input and the outputs of earlier steps edited as typed, and which runs on from the step (`POST /v1/tasks/{id}/fork`).
 * The input is checked to be a JSON object before anything is sent. The page offers it only to a token that may submit.
 */
export function ForkForm(props: {
  api: Api;
  task: TaskView;
  trace: Trace;
  step: StepTrace;
  onOpen: (taskId: string) => void;
  onRefused: () => void;
}) {
  const { api, task, trace, step } = props;
  const request = useRequest(props.onRefused);
  // A cut input cannot be shown whole: the field starts empty, and empty keeps the original's.
  const original = trace.inputCut === undefined ? trace.input : undefined;
  const [open, setOpen] = useState(false);
  const [input, setInput] = useState(() => inputText(original));
  const [outputs, setOutputs] = useState<Record<string, string>>({});
  const [invalid, setInvalid] = useState<string | undefined>(undefined);
  const [started, setStarted] = useState<Started | undefined>(undefined);
  // A retry of the same fork whose answer was lost makes no second task; another edit is a fork of its own.
  const [retry] = useState(() => new RetryKey());
  const earlier = stepsBefore(trace.steps, step.step);

  const fork = async (e: Event) => {
    e.preventDefault();
    const checked = forkBody({ at: step.step, inputText: input, original, outputs });
    if (!checked.ok) {
      setInvalid(checked.error);
      return;
    }
    setInvalid(undefined);
    const answer = await request.run('Fork', () =>
      retry.send(checked.body, (key) =>
        api.post<Started>(`/v1/tasks/${task.taskId}/fork`, checked.body, { 'idempotency-key': key }),
      ),
    );
    if (answer) setStarted(answer);
  };
  if (!open) {
    return html`<div class="fork">
      <button class="small quiet" onClick=${() => setOpen(true)} data-testid="fork-open" data-step=${step.step}>Fork from ${step.step}</button>
      ${started ? forked(started, props.onOpen) : null}
    </div>`;
  }
  return html`<form class="fork fork-form" onSubmit=${fork} data-testid="fork-form" data-step=${step.step}>
    <label
      ><span>Input (JSON)${trace.inputCut === undefined ? '' : ' — the original is stored cut: empty keeps it'}</span>
      <textarea
        rows="4"
        value=${input}
        onInput=${(e: Event) => {
          setInput((e.target as HTMLTextAreaElement).value);
          // What was wrong with the text before is no longer said of the text now.
          setInvalid(undefined);
        }}
        data-testid="fork-input"
      ></textarea>
    </label>
    ${earlier.map(
      (s) => html`<label
        ><span>Output of ${s} <span class="hint">(empty keeps its own)</span></span>
        <textarea
          rows="2"
          value=${outputs[s] ?? ''}
          onInput=${(e: Event) => setOutputs((all) => ({ ...all, [s]: (e.target as HTMLTextAreaElement).value }))}
          data-testid="fork-output"
          data-step=${s}
        ></textarea>
      </label>`,
    )}
    <div class="actions">
      <button type="submit" disabled=${request.busy} data-testid="fork">Fork from ${step.step}</button>
      <button type="button" class="quiet" disabled=${request.busy} onClick=${() => setOpen(false)} data-testid="fork-close">Close</button>
    </div>
    ${invalid ? html`<p class="bad refusal" role="alert" data-testid="fork-invalid">${invalid}</p>` : null}
    ${request.refusal ? html`<p class="bad refusal" role="alert" data-testid="fork-refused">${request.refusal}</p>` : null}
    ${started ? forked(started, props.onOpen) : null}
  </form>`;
}

function forked(started: Started, onOpen: (taskId: string) => void) {
  return html`<p class="started" data-testid="forked">Started <${TaskLink} taskId=${started.taskId} onOpen=${onOpen} testId="new-task" />, a fork of this task at ${started.origin.step}.</p>`;
}
