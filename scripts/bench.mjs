// Runs a benchmark as users run Troupe: bench/<name>.mts is bundled with esbuild the way the CLI is (Troupe's own
// packages bundled, npm packages loaded from node_modules), then run by plain node with --expose-gc. Running it
// through tsx instead would measure tsx: its keep-names helper wraps every function Troupe creates (CPU, and a
// property store on each closure, 12 KB of heap per task in flight).
//
//   node scripts/bench.mjs <name> [args…]          bench/<name>.mts
//   node scripts/bench.mjs <path>.mts [args…]      another bench, e.g. apps/coordinator/bench/inProcessRun.mts
//                                                  (the rule scripts/benchAB.mjs follows too)
import { spawn } from 'node:child_process';
import { basename, dirname, join, resolve } from 'node:path';
import { build } from 'esbuild';

const [name = 'core', ...args] = process.argv.slice(2);
const root = join(import.meta.dirname, '..');
const entry = name.endsWith('.mts') ? resolve(name) : join(root, 'bench', `${name}.mts`);
const outfile = join(dirname(entry), 'dist', `${basename(entry, '.mts')}.mjs`);
await build({
  // The script finds its fixtures beside its source.
  define: { 'import.meta.dirname': JSON.stringify(dirname(entry)) },
  entryPoints: [entry],
  outfile,
  bundle: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  logLevel: 'warning',
  plugins: [
    {
      name: 'npm-packages-external',
      setup(build) {
        // Bare imports other than Troupe's own packages load from node_modules, as in the CLI's bundles.
        build.onResolve({ filter: /^[^./]/ }, (args) =>
          args.path.startsWith('@troupe/') ? undefined : { path: args.path, external: true },
        );
      },
    },
  ],
});
const child = spawn(process.execPath, ['--expose-gc', outfile, ...args], { stdio: 'inherit' });
child.on('exit', (code, signal) => process.exit(signal ? 1 : (code ?? 1)));
