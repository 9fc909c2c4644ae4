/** The states a task ends in: it runs no more, its output and files are final. */
export const ENDED: ReadonlySet<string> = new Set(['completed', 'failed', 'cancelled']);

/** Calls `run` once `ms` after the last call: a burst of events makes one reload. */
export function debounced(run: () => void, ms: number): () => void {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return () => {
    clearTimeout(timer);
    timer = setTimeout(run, ms);
  };
}
