import { execFileSync } from 'node:child_process';
import { join } from 'node:path';

/** vitest global setup: the end-to-end tests run the compiled CLI, so build it from the source as it is now. */
export default function setup(): void {
  const root = join(import.meta.dirname, '..', '..');
  execFileSync(process.execPath, [join(root, 'scripts', 'buildCli.mjs')], { cwd: root, stdio: 'inherit' });
}
