import { existsSync, type FSWatcher, watch } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';
import { type Clock, systemClock } from '@troupe/runtime';

/** How long a file must stay quiet after an event before it counts as changed: a save is several events. */
export const DEFAULT_WATCH_DEBOUNCE_MS = 150;

export interface FileWatchOptions {
  /** Told the files that changed once each has been quiet for `debounceMs`; each path as given to `files`. */
  onChange: (files: string[]) => void;
  /** A directory that can no longer be watched (removed, or too many watches); its files are not followed. */
  onError?: (error: Error, directory: string) => void;
  debounceMs?: number;
  clock?: Clock;
}

/** Files being watched; {@link watchFiles} makes one. */
export interface FileWatch {
  /** Follows these files from now on, in place of those followed before. */
  follow(files: readonly string[]): void;
  close(): void;
}

/**
 * Watches files through their directories, not themselves: an editor that saves by writing a new file and renaming
 * it over the old one (vim, most IDEs, `sed -i`) replaces the inode a watch on the file would hold, and a file
 * removed and made again is followed on. Events of one file within `debounceMs` of each other make one change.
 */
export function watchFiles(files: readonly string[], options: FileWatchOptions): FileWatch {
  const clock = options.clock ?? systemClock;
  const debounceMs = options.debounceMs ?? DEFAULT_WATCH_DEBOUNCE_MS;
  /** Each directory's watcher, and the files followed in it by name, each with the path it was given as. */
  const directories = new Map<string, { watcher: FSWatcher; files: Map<string, string> }>();
  const pending = new Set<string>();
  let timer: unknown;
  let closed = false;

  const flush = () => {
    timer = undefined;
    const changed = [...pending];
    pending.clear();
    if (changed.length > 0 && !closed) options.onChange(changed);
  };
  const touched = (file: string) => {
    pending.add(file);
    clock.clearTimeout(timer);
    timer = clock.setTimeout(flush, debounceMs);
  };

  const open = (directory: string, followed: Map<string, string>) => {
    try {
      const watcher = watch(directory, { persistent: false }, (_event, name) => {
        const entry = directories.get(directory);
        if (!entry) return;
        // The directory removed: Linux says so once, naming it, and then nothing, whatever is made in its place.
        if (!existsSync(directory)) {
          directories.delete(directory);
          watcher.close();
          const why = `${directory} was removed; a directory made again in its place is not followed`;
          options.onError?.(new Error(why), directory);
        }
        // Some platforms do not say which file: every file followed there may have changed.
        const names = name === null ? [...entry.files.keys()] : [name.toString()];
        for (const n of names) {
          const file = entry.files.get(n);
          if (file !== undefined) touched(file);
        }
      });
      watcher.on('error', (error) => {
        directories.delete(directory);
        watcher.close();
        options.onError?.(error, directory);
      });
      directories.set(directory, { watcher, files: followed });
    } catch (error) {
      options.onError?.(error as Error, directory);
    }
  };

  const follow = (list: readonly string[]) => {
    // A reload that ends after the close asks to follow its files: nothing may be watched again.
    if (closed) return;
    const wanted = new Map<string, Map<string, string>>();
    for (const file of list) {
      const path = resolve(file);
      const directory = dirname(path);
      const names = wanted.get(directory) ?? new Map<string, string>();
      names.set(basename(path), file);
      wanted.set(directory, names);
    }
    for (const [directory, entry] of directories) {
      if (wanted.has(directory)) continue;
      entry.watcher.close();
      directories.delete(directory);
    }
    for (const [directory, names] of wanted) {
      const entry = directories.get(directory);
      if (entry) entry.files = names;
      else open(directory, names);
    }
  };

  follow(files);
  return {
    follow,
    close() {
      closed = true;
      clock.clearTimeout(timer);
      for (const entry of directories.values()) entry.watcher.close();
      directories.clear();
    },
  };
}
