import { html } from 'htm/preact';

/** A task id that opens that task when clicked: how the dashboard links the tasks of one family. */
export function TaskLink(props: { taskId: string; onOpen: (taskId: string) => void; testId?: string }) {
  return html`<button class="link task-link" onClick=${() => props.onOpen(props.taskId)} data-testid=${props.testId ?? 'task-link'} data-task=${props.taskId}>${props.taskId}</button>`;
}
