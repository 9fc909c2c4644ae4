import { execFileSync } from 'node:child_process';
import { join } from 'node:path';

/**
 * vitest global setup: the end-to-end tests run the compiled CLI and load the built dashboard, so both are built
 * from the source as it is now.
 */
export default function setup(): void {
  const root = join(import.meta.dirname, '..', '..');
  for (const script of ['buildCli.mjs', 'buildDashboard.mjs']) {
    execFileSync(process.execPath, [join(root, 'scripts', script)], { cwd: root, stdio: 'inherit' });
  }
}
