#!/usr/bin/env node
// Runs the compiled CLI (apps/cli/dist/troupe/, built by `npm ci` and `npm run build`).
import { existsSync } from 'node:fs';

const main = new URL('../dist/troupe/main.js', import.meta.url);
if (!existsSync(main)) {
  process.stderr.write(
    'troupe: the CLI is not built yet; run `npm run build` (npm ci does it) in the Troupe checkout\n',
  );
  process.exit(1);
}
await import(main.href);
