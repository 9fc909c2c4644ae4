// Builds the `troupe` CLI that users run, with esbuild: apps/cli/src/main.ts into apps/cli/dist/troupe/main.js,
// and each command into a bundle of its own (commands/<name>.js) that main loads only when that command runs.
// Each bundle holds just the parts of Troupe's packages its command uses (tree-shaken), so `troupe status` does
// not load the model SDKs; npm packages stay external and load from node_modules as usual. Shared chunks are not
// used: esbuild assigns whole modules to them, so one would pull every package in. Type checking is tsc's job
// (`npm run typecheck`); this turns TypeScript into JavaScript that starts fast. Runs on `npm ci` (prepare) and
// before `npm test`.
import { readdirSync, readFileSync } from 'node:fs';
import { rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { build } from 'esbuild';

const root = join(import.meta.dirname, '..');
const workspaces = [
  'packages/protocol',
  'packages/llm',
  'packages/runtime',
  'apps/coordinator',
  'apps/gateway',
  'apps/cli',
];
const external = new Set();
for (const dir of workspaces) {
  const manifest = JSON.parse(readFileSync(join(root, dir, 'package.json'), 'utf8'));
  for (const name of Object.keys(manifest.dependencies ?? {})) {
    if (!name.startsWith('@troupe/')) external.add(name);
  }
}
const outdir = join(root, 'apps/cli/dist/troupe');

const common = {
  bundle: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  // Deep imports such as `@modelcontextprotocol/sdk/client/index.js` are external too.
  external: [...external].flatMap((name) => [name, `${name}/*`]),
  sourcemap: 'linked',
  logLevel: 'warning',
};
/** main's `import('./commands/x.ts')` stays an import, of the command's own bundle. */
const commandsApart = {
  name: 'commands-apart',
  setup(build) {
    build.onResolve({ filter: /^\.\/commands\/.*\.ts$/ }, (args) => ({
      path: args.path.replace(/\.ts$/, '.js'),
      external: true,
    }));
  },
};
const commandsDir = join(root, 'apps/cli/src/commands');
const commands = readdirSync(commandsDir).filter((file) => file.endsWith('.ts'));

// Built aside and moved into place, so a `troupe` started meanwhile finds the old build or the new, whole.
const next = `${outdir}.next-${process.pid}`;
const old = `${outdir}.old-${process.pid}`;
await rm(next, { recursive: true, force: true });
await build({
  ...common,
  entryPoints: [join(root, 'apps/cli/src/main.ts')],
  outdir: next,
  plugins: [commandsApart],
});
/** A command's `import('./other.ts')` of another command stays an import too: it loads only when reached. */
const siblingsApart = {
  name: 'siblings-apart',
  setup(build) {
    build.onResolve({ filter: /^\.\/[A-Za-z]+\.ts$/ }, (args) =>
      args.kind === 'dynamic-import' && args.resolveDir === commandsDir
        ? { path: args.path.replace(/\.ts$/, '.js'), external: true }
        : undefined,
    );
  },
};
await build({
  ...common,
  entryPoints: commands.map((file) => join(commandsDir, file)),
  outdir: join(next, 'commands'),
  plugins: [siblingsApart],
});
await rename(outdir, old).catch((error) => {
  if (error.code !== 'ENOENT') throw error;
});
await rename(next, outdir);
await rm(old, { recursive: true, force: true });
