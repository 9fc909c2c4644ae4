import { html } from 'htm/preact';
import type { TaskOrigin, TaskView } from './client.ts';
import { TaskLink } from './familyLink.ts';

const MADE = { restart: 'A restart', fork: 'A fork' } as const;

/** The words around the original's link: `A fork of ` … ` at step review, with its input edited`. */
export function originText(origin: TaskOrigin): [string, string] {
  const edited = origin.edited?.length ? `, with ${origin.edited.join(' and ')} edited` : '';
  const by = origin.by ? ` by ${origin.by}` : '';
  return [`${MADE[origin.kind]} of `, ` from step ${origin.step}${edited}${by}`];
}

/**
 * The task's family: the task it was restarted or forked from (a link back), and the tasks restarted or forked from
 * it that the page knows of.
 */
export function TaskFamily(props: {
  task: TaskView;
  tasks: readonly TaskView[];
  onOpen: (taskId: string) => void;
}) {
  const { task } = props;
  const children = props.tasks.filter((t) => t.origin?.taskId === task.taskId);
  if (!task.origin && children.length === 0) return null;
  return html`<div class="family" data-testid="family">
    ${
      task.origin
        ? html`<p data-testid="origin">${originText(task.origin)[0]}<${TaskLink} taskId=${task.origin.taskId} onOpen=${props.onOpen} testId="origin-link" />${originText(task.origin)[1]}</p>`
        : null
    }
    ${
      children.length
        ? html`<p data-testid="descendants">Made from it: ${children.map(
            (t, i) =>
              html`${i ? ', ' : ''}<${TaskLink} taskId=${t.taskId} onOpen=${props.onOpen} testId="descendant-link" />${` (${t.origin?.kind} from ${t.origin?.step})`}`,
          )}</p>`
        : null
    }
  </div>`;
}

/** How the task list marks a task of a family: what it was made from, shortly. */
export const originLabel = (task: TaskView): string =>
  task.origin ? `${task.origin.kind} of …${task.origin.taskId.slice(-8)} @ ${task.origin.step}` : '';
