import { html } from 'htm/preact';
import { useEffect, useState } from 'preact/hooks';
import { may } from './access.ts';
import { type Api, ApiError, type TaskView, type TokenInfo } from './client.ts';
import { ENDED } from './taskEnds.ts';

/** A dataset version as `GET /v1/evals/datasets` lists it and `POST …/cases` answers it. */
interface DatasetSummary {
  name: string;
  version: number;
  createdAt: string;
  cases: number;
  recorded: number;
  description?: string;
}

/** What `POST /v1/evals/datasets/{name}/cases` answers. */
interface AddedRuns {
  dataset: DatasetSummary;
  previousVersion?: number;
  added: number;
  replaced: number;
  skipped: { taskId: string; why: string }[];
}

/** A dataset name as the gateway takes it: 1-63 of a-z, 0-9 and "-", starting and ending with a letter or digit. */
const NAME = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

/**
 * **Add to dataset** on an ended task: its run (events, journal records, stored values, kept whole to replay) becomes
 * a case of a dataset picked from those stored or named anew, as `troupe eval dataset add --tasks` adds it
 * (`POST /v1/evals/datasets/{name}/cases`). Says the version stored, or the gateway's refusal. Offered to a token that
 * may submit on the task's pipeline; the datasets are offered to pick from when the token may list them.
 */
export function DatasetAdd(props: {
  api: Api;
  task: TaskView;
  who: TokenInfo | undefined;
  /** A refusal on the ground of the token: read what the token may do again. */
  onRefused: () => void;
}) {
  const { api, task } = props;
  const [open, setOpen] = useState(false);
  const [name, setName] = useState('');
  const [names, setNames] = useState<string[]>([]);
  const [busy, setBusy] = useState(false);
  const [done, setDone] = useState<string | undefined>(undefined);
  const [refusal, setRefusal] = useState<string | undefined>(undefined);
  // Another task shown starts with nothing open, said or refused.
  useEffect(() => {
    setOpen(false);
    setDone(undefined);
    setRefusal(undefined);
  }, [task.taskId]);
  useEffect(() => {
    if (!open) return;
    // Only a token limited to no pipeline lists datasets; another names one and is not offered a list.
    api
      .get<{ datasets: DatasetSummary[] }>('/v1/evals/datasets')
      .then(({ datasets }) => setNames([...new Set(datasets.map((d) => d.name))].sort()))
      .catch(() => setNames([]));
  }, [open, api]);
  // Datasets may hold runs of any pipeline: only a token with no pipeline list adds to them (as the gateway says).
  if (
    !ENDED.has(task.status) ||
    !may(props.who, 'submit', task.pipeline) ||
    props.who?.pipelines !== undefined
  )
    return null;

  const valid = NAME.test(name);
  const add = async () => {
    setBusy(true);
    setRefusal(undefined);
    setDone(undefined);
    try {
      const added = await api.post<AddedRuns>(`/v1/evals/datasets/${name}/cases`, { taskIds: [task.taskId] });
      const d = added.dataset;
      setDone(
        `Stored dataset ${d.name} version ${d.version}: ${d.cases} case${d.cases === 1 ? '' : 's'} (${d.recorded} recorded); ` +
          `${added.replaced > 0 ? 'this task replaced its case' : 'this task added'}${
            added.previousVersion === undefined
              ? ', a new dataset'
              : ` since version ${added.previousVersion}`
          }`,
      );
      setOpen(false);
    } catch (error) {
      setRefusal(`The gateway did not add it: ${error instanceof Error ? error.message : String(error)}`);
      if (error instanceof ApiError && (error.status === 401 || error.status === 403)) props.onRefused();
    } finally {
      setBusy(false);
    }
  };

  return html`<div class="dataset-add" data-testid="dataset-add">
    ${
      open
        ? html`<label>Dataset
            <input list="dataset-names" placeholder="a name, new or stored" value=${name} onInput=${(e: Event) => setName((e.target as HTMLInputElement).value.trim())} data-testid="dataset-name" />
          </label>
          <datalist id="dataset-names">${names.map((n) => html`<option value=${n} />`)}</datalist>
          <button disabled=${busy || !valid} onClick=${add} data-testid="dataset-add-confirm">Add</button>
          <button class="quiet" disabled=${busy} onClick=${() => setOpen(false)}>Close</button>
          ${name !== '' && !valid ? html`<span class="hint">1-63 of a-z, 0-9 and "-", starting and ending with a letter or digit</span>` : html`<span class="hint">its run is kept whole, to replay as an eval case</span>`}`
        : html`<button class="quiet" onClick=${() => setOpen(true)} data-testid="dataset-add-open">Add to dataset</button>`
    }
    ${done ? html`<p class="good" role="status" data-testid="dataset-added">${done}</p>` : null}
    ${refusal ? html`<p class="bad refusal" role="alert" data-testid="dataset-refused">${refusal}</p>` : null}
  </div>`;
}
