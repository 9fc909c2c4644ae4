import { type FSWatcher, watch } from 'node:fs';
import { basename, dirname } from 'node:path';
import type { Logger } from '@troupe/runtime';
import type { TokenStore } from './auth.ts';

/** How often the tokens file is read again when no change was signalled: a revoked token stops within about this. */
export const TOKENS_RELOAD_MS = 1_000;

/**
 * Keeps a token store in step with its file: read again as soon as the file's directory signals a change to it
 * (editors save by renaming a new file over the old one, so the directory is watched, not the file), and every
 * `intervalMs` besides, since `fs.watch` misses changes on some file systems (NFS, some container mounts). A file
 * that cannot be read or is not valid leaves the tokens as they were, with an error in the log saying why. Returns
 * the function that stops watching.
 */
export function watchTokens(
  store: TokenStore,
  logger: Logger,
  intervalMs: number = TOKENS_RELOAD_MS,
): () => void {
  const file = store.file;
  if (file === undefined) return () => {};
  let running: Promise<void> | undefined;
  let again = false;
  let lastError: string | undefined;
  const reload = (): void => {
    // One read at a time; a change signalled during it is read once it is done.
    if (running) {
      again = true;
      return;
    }
    running = store
      .reload()
      .then((changed) => {
        lastError = undefined;
        if (changed) logger.info({ file, tokens: store.size }, `tokens reloaded from ${file}`);
      })
      .catch((error: unknown) => {
        const message = (error as Error).message;
        // Said once per problem, not at every tick.
        if (message !== lastError)
          logger.error({ file, err: error }, `tokens file unchanged in use: ${message}`);
        lastError = message;
      })
      .finally(() => {
        running = undefined;
        if (again) {
          again = false;
          reload();
        }
      });
  };
  let watcher: FSWatcher | undefined;
  try {
    watcher = watch(dirname(file), { persistent: false }, (_event, name) => {
      if (name === null || name === basename(file)) reload();
    });
    watcher.on('error', () => watcher?.close());
  } catch {
    // The interval below still reloads.
  }
  const timer = setInterval(reload, intervalMs);
  timer.unref();
  return () => {
    clearInterval(timer);
    watcher?.close();
  };
}
