import { html } from 'htm/preact';
import { useEffect, useState } from 'preact/hooks';
import type { Api } from './client.ts';
import { count } from './format.ts';

/** One file of a task's workspace, as `GET /v1/tasks/{id}/files` lists it. */
interface WorkspaceFile {
  path: string;
  bytes: number;
  modified: string;
  contentType: string;
}

interface WorkspaceListing {
  taskId: string;
  files: WorkspaceFile[];
  omitted: { path: string; reason: string }[];
  truncated: boolean;
  maxFileBytes: number;
}

/** Past this, a text file is offered as a download rather than drawn in the page. */
const INLINE_TEXT_BYTES = 512 * 1024;

/** The gateway serves text types with `charset=utf-8` (what the file tools write): those are shown as text. */
const isText = (file: WorkspaceFile) =>
  file.contentType.startsWith('text/') || /charset=utf-8/i.test(file.contentType);

const fileUrl = (taskId: string, path: string, download = false) =>
  `/v1/tasks/${encodeURIComponent(taskId)}/files/${path.split('/').map(encodeURIComponent).join('/')}${download ? '?download=true' : ''}`;

const size = (bytes: number) =>
  bytes < 1024
    ? `${bytes} B`
    : bytes < 1024 * 1024
      ? `${(bytes / 1024).toFixed(1)} KiB`
      : `${(bytes / 1024 / 1024).toFixed(1)} MiB`;

/**
 * A finished task's workspace files (`GET /v1/tasks/{id}/files`): each with its size, a text file opened in the page
 * as text (never as markup), any other saved as a download. A gateway that does not hold the workspace says so, and
 * where the files are: that message is shown as it is.
 */
export function TaskFiles(props: { api: Api; taskId: string }) {
  const { api, taskId } = props;
  const [listing, setListing] = useState<WorkspaceListing | undefined>(undefined);
  const [refusal, setRefusal] = useState<string | undefined>(undefined);
  const [open, setOpen] = useState<{ path: string; text?: string; error?: string } | undefined>(undefined);
  useEffect(() => {
    let current = true;
    setListing(undefined);
    setRefusal(undefined);
    setOpen(undefined);
    api.get<WorkspaceListing>(`/v1/tasks/${encodeURIComponent(taskId)}/files`).then(
      (loaded) => current && setListing(loaded),
      (error: unknown) => current && setRefusal(error instanceof Error ? error.message : String(error)),
    );
    return () => {
      current = false;
    };
  }, [api, taskId]);

  const show = async (file: WorkspaceFile) => {
    setOpen({ path: file.path });
    try {
      const text = await (await api.raw(fileUrl(taskId, file.path))).text();
      setOpen({ path: file.path, text });
    } catch (error) {
      setOpen({ path: file.path, error: error instanceof Error ? error.message : String(error) });
    }
  };
  // The file is fetched with the token (a plain link could not send it), then handed to the browser to save.
  const save = async (file: WorkspaceFile) => {
    try {
      const blob = await (await api.raw(fileUrl(taskId, file.path, true))).blob();
      const url = URL.createObjectURL(blob);
      const link = document.createElement('a');
      link.href = url;
      link.download = file.path.split('/').at(-1) ?? file.path;
      link.click();
      setTimeout(() => URL.revokeObjectURL(url), 10_000);
    } catch (error) {
      setOpen({ path: file.path, error: error instanceof Error ? error.message : String(error) });
    }
  };

  return html`<div class="task-files" data-testid="files">
    <h4>Files</h4>
    ${
      refusal
        ? html`<p class="hint" data-testid="files-refused">${refusal}</p>`
        : !listing
          ? html`<p class="hint">Loading…</p>`
          : listing.files.length === 0
            ? html`<p class="hint">The task left no files in its workspace.</p>`
            : html`<ul class="files">
                ${listing.files.map((file) => {
                  const inline =
                    isText(file) && file.bytes <= INLINE_TEXT_BYTES && file.bytes <= listing.maxFileBytes;
                  return html`<li key=${file.path} data-testid="file" data-path=${file.path} class=${open?.path === file.path ? 'selected' : ''}>
                    ${
                      inline
                        ? html`<button class="link" onClick=${() => show(file)} data-testid="file-open">${file.path}</button>`
                        : html`<span class="path">${file.path}</span>`
                    }
                    <span class="hint">${size(file.bytes)} · ${file.contentType.split(';')[0]}</span>
                    ${
                      file.bytes > listing.maxFileBytes
                        ? html`<span class="hint">over the gateway's ${size(listing.maxFileBytes)} cap: read it with troupe files</span>`
                        : html`<button class="link" onClick=${() => save(file)} data-testid="file-download">download</button>`
                    }
                  </li>`;
                })}
              </ul>
              ${listing.truncated ? html`<p class="hint" data-testid="files-cut">The list is cut after ${count(listing.files.length, 'file')}.</p>` : null}
              ${listing.omitted.length > 0 ? html`<p class="hint">Not listed: ${listing.omitted.map((o) => `${o.path} (${o.reason.replace('_', ' ')})`).join(', ')}</p>` : null}`
    }
    ${
      open
        ? html`<div class="file-view" data-testid="file-view" data-path=${open.path}>
            <div class="panel-head"><strong>${open.path}</strong><button class="link" onClick=${() => setOpen(undefined)}>close</button></div>
            ${
              open.error
                ? html`<p class="bad" role="alert">${open.error}</p>`
                : open.text === undefined
                  ? html`<p class="hint">Loading…</p>`
                  : html`<pre data-testid="file-text">${open.text}</pre>`
            }
          </div>`
        : null
    }
  </div>`;
}
