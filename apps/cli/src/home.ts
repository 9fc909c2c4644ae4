import { statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

/** The name of a Troupe home directory inside a project. */
export const HOME_DIR = '.troupe';

/**
 * Where `troupe up` keeps its data and records its server: `--home`, else `$TROUPE_HOME`, else the nearest
 * `.troupe` directory in the current directory or above it (as git finds `.git`), else `./.troupe`. So any
 * command run anywhere inside a project finds the server its `troupe up` started.
 */
export function resolveHome(explicit?: string, cwd = process.cwd()): string {
  if (explicit !== undefined && explicit !== '') return resolve(cwd, explicit);
  const fromEnv = process.env.TROUPE_HOME;
  if (fromEnv !== undefined && fromEnv !== '') return resolve(cwd, fromEnv);
  for (let dir = resolve(cwd); ; dir = dirname(dir)) {
    if (isDirectory(join(dir, HOME_DIR))) return join(dir, HOME_DIR);
    if (dirname(dir) === dir) return resolve(cwd, HOME_DIR);
  }
}

/** `NATS_URL` when it names something: an empty one counts as unset. */
export function natsUrlFromEnv(): string | undefined {
  const url = process.env.NATS_URL?.trim();
  return url === undefined || url === '' ? undefined : url;
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}
