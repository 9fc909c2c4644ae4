import { html } from 'htm/preact';
import { useState } from 'preact/hooks';

/**
 * A task's output as text to show and copy: a string as it is, JSON (a structured value, or a reply that is JSON text)
 * pretty-printed. The text only ever becomes a text node, so markup in an output is shown, never run.
 */
export function outputText(output: unknown): { text: string; json: boolean } {
  if (typeof output === 'string') {
    const trimmed = output.trim();
    if (trimmed.startsWith('{') || trimmed.startsWith('[')) {
      try {
        return { text: JSON.stringify(JSON.parse(trimmed), null, 2), json: true };
      } catch {
        // Text that merely starts like JSON stays the text it is.
      }
    }
    return { text: output, json: false };
  }
  return { text: JSON.stringify(output, null, 2) ?? String(output), json: true };
}

/** A finished task's final output, with a button that copies it. */
export function TaskOutput(props: { output: unknown }) {
  const { text, json } = outputText(props.output);
  const [copied, setCopied] = useState<'yes' | 'no' | undefined>(undefined);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(text);
      setCopied('yes');
    } catch {
      // No clipboard (a page not served over https or from this machine): the text is there to select.
      setCopied('no');
    }
    setTimeout(() => setCopied(undefined), 2_000);
  };
  return html`<div class="task-output" data-testid="output">
    <div class="panel-head">
      <h4>Output${json ? html` <span class="hint">JSON</span>` : null}</h4>
      <button class="small" onClick=${copy} data-testid="copy-output">
        ${copied === 'yes' ? 'Copied' : copied === 'no' ? 'Select and copy' : 'Copy'}
      </button>
    </div>
    <pre class=${json ? 'json' : 'text'} data-testid="output-text">${text}</pre>
  </div>`;
}
