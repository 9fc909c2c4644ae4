// Bundles apps/coordinator/bench/<name>.mts with esbuild as scripts/bench.mjs bundles bench/ (Troupe's packages
// bundled, npm packages from node_modules; not tsx, whose helpers would be measured too) and runs it with plain node.
//
//   node apps/coordinator/bench/run.mjs inProcessRun [count]
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { build } from 'esbuild';

const [name = 'inProcessRun', ...args] = process.argv.slice(2);
const here = import.meta.dirname;
const outfile = join(here, 'dist', `${name}.mjs`);
await build({
  define: { 'import.meta.dirname': JSON.stringify(here) },
  entryPoints: [join(here, `${name}.mts`)],
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
        build.onResolve({ filter: /^[^./]/ }, (args) =>
          args.path.startsWith('@troupe/') ? undefined : { path: args.path, external: true },
        );
      },
    },
  ],
});
const child = spawn(process.execPath, ['--expose-gc', outfile, ...args], { stdio: 'inherit' });
child.on('exit', (code, signal) => process.exit(signal ? 1 : (code ?? 1)));
