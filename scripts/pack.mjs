// Writes the installable tarballs to dist/pack/ (or --out <dir>): the `troupe` CLI (@troupe/cli) and the libraries
// a user's program imports (@troupe/protocol, llm, runtime, client, coordinator), all at one version.
//
// Why a staging directory: in the repository every package's `exports` point at its TypeScript source, which
// vitest, tsx and tsc resolve across the workspace; that stays as it is. A release is built beside it instead:
// each package is assembled under <out>/.stage/<name>/ with compiled JavaScript, .d.ts types and a package.json
// generated from the workspace one (exports mapped from src/*.ts to dist/*.js, versions pinned), and `npm pack`
// runs there. Nothing in the workspace changes, so packing never disturbs development or a test run.
//
// The CLI is the esbuild bundle scripts/buildCli.mjs makes (Troupe's code inside; npm packages external), so
// `npm run pack` builds first and this script only assembles. Its dependencies are the npm packages that bundle
// actually imports, read from the bundle itself, at the versions the workspace pins.
//
// Usage: node scripts/pack.mjs [--out <dir>]   (npm run pack builds the CLI and the dashboard, then runs this)
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { dirname, join, relative, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { buildSync } from 'esbuild';

const root = join(import.meta.dirname, '..');
const USAGE = 'usage: node scripts/pack.mjs [--out <dir>]   (default dist/pack; npm run pack builds first)';
let args;
try {
  ({ values: args } = parseArgs({
    options: { out: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
  }));
} catch (error) {
  console.error(`${error.message}\n${USAGE}`);
  process.exit(2);
}
if (args.help) {
  console.log(USAGE);
  process.exit(0);
}
const out = resolve(args.out ?? join(root, 'dist', 'pack'));
const stage = join(out, '.stage');

/** The libraries users import, in dependency order; each is compiled from its src/ with tsc. */
const LIBRARIES = [
  'packages/protocol',
  'packages/llm',
  'packages/runtime',
  'packages/client',
  'apps/coordinator',
];
const CLI = 'apps/cli';
const GATEWAY = 'apps/gateway';
/** What every published package needs at least; the root package.json says the same. */
const rootManifest = readJson(join(root, 'package.json'));
const ENGINES = rootManifest.engines;

class PackError extends Error {}

try {
  main();
} catch (error) {
  if (!(error instanceof PackError)) throw error;
  process.stderr.write(`pack: ${error.message}\n`);
  process.exitCode = 1;
} finally {
  rmSync(stage, { recursive: true, force: true });
}

function main() {
  const workspaces = readWorkspaces();
  const version = oneVersion(workspaces);
  const pins = pinnedVersions(workspaces);
  requireBuilt();

  rmSync(stage, { recursive: true, force: true });
  mkdirSync(stage, { recursive: true });
  for (const file of existsSync(out) ? readdirSync(out) : []) {
    if (file.endsWith('.tgz')) rmSync(join(out, file));
  }

  compileLibraries(workspaces);
  const staged = [];
  for (const dir of LIBRARIES) staged.push(stageLibrary(workspaces.get(dir), version));
  staged.push(stageCli(workspaces, version, pins));

  for (const dir of staged) {
    const [packed] = JSON.parse(
      execFileSync('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', out], {
        cwd: dir,
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'inherit'],
      }),
    );
    process.stdout.write(
      `${relative(process.cwd(), join(out, packed.filename))}  ${kib(packed.size)} packed, ${kib(packed.unpackedSize)} unpacked, ${packed.entryCount} files\n`,
    );
  }
}

/** Every workspace's directory (relative to the root) → its package.json and where it is. */
function readWorkspaces() {
  const found = new Map();
  for (const parent of ['packages', 'apps']) {
    for (const name of readdirSync(join(root, parent))) {
      const dir = `${parent}/${name}`;
      const file = join(root, dir, 'package.json');
      if (existsSync(file)) found.set(dir, { dir, path: join(root, dir), manifest: readJson(file) });
    }
  }
  return found;
}

/** Troupe's packages share one version (docs/releasing.md): a release sets it everywhere at once. */
function oneVersion(workspaces) {
  const versions = new Map();
  for (const { manifest } of workspaces.values()) {
    versions.set(manifest.version, [...(versions.get(manifest.version) ?? []), manifest.name]);
  }
  if (versions.size !== 1) {
    const listed = [...versions].map(([v, names]) => `${v}: ${names.join(', ')}`).join('; ');
    throw new PackError(
      `the workspace packages must share one version, but they have ${listed}. Set it with ` +
        '`npm version <version> --workspaces --no-git-tag-version`.',
    );
  }
  return [...versions.keys()][0];
}

/** Each npm package's version as the workspace pins it (exactly, one version across all workspaces). */
function pinnedVersions(workspaces) {
  const pins = new Map();
  for (const { manifest } of workspaces.values()) {
    for (const [name, spec] of Object.entries(manifest.dependencies ?? {})) {
      if (name.startsWith('@troupe/')) continue;
      const before = pins.get(name);
      if (before !== undefined && before.spec !== spec) {
        throw new PackError(
          `${name} is pinned to ${before.spec} in ${before.by} but ${spec} in ${manifest.name}: pin one version`,
        );
      }
      pins.set(name, { spec, by: manifest.name });
    }
  }
  return pins;
}

/** The CLI bundle and the dashboard are built by `npm run build`, which `npm run pack` runs first. */
function requireBuilt() {
  for (const file of ['apps/cli/dist/troupe/main.js', 'apps/gateway/dashboard/dist/index.html']) {
    if (!existsSync(join(root, file))) {
      throw new PackError(
        `${file} is missing: run \`npm run build\` (or \`npm run pack\`, which builds first)`,
      );
    }
  }
}

/**
 * Compiles every library's src/ in one tsc program, rooted at the repository so each package's output lands under
 * its own path; `@troupe/*` imports stay bare specifiers, which resolve to the published packages once installed.
 */
function compileLibraries(workspaces) {
  const config = {
    extends: join(root, 'tsconfig.base.json'),
    compilerOptions: {
      rootDir: root,
      outDir: join(stage, '.tsc'),
      composite: false,
      incremental: false,
      declaration: true,
      sourceMap: false,
      noEmitOnError: true,
      typeRoots: [join(root, 'node_modules', '@types')],
    },
    include: LIBRARIES.map((dir) => join(workspaces.get(dir).path, 'src')),
  };
  const file = join(stage, 'tsconfig.json');
  writeFileSync(file, JSON.stringify(config, null, 2));
  try {
    execFileSync(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', file], {
      cwd: root,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  } catch (error) {
    const said = `${error.stdout ?? ''}${error.stderr ?? ''}`.trim();
    throw new PackError(`tsc could not compile the libraries; nothing was packed:\n${said}`);
  }
}

function stageLibrary(workspace, version) {
  const { manifest, path, dir } = workspace;
  const target = join(stage, manifest.name.replace('@troupe/', ''));
  const dist = join(target, 'dist');
  cpSync(join(stage, '.tsc', dir, 'src'), dist, { recursive: true });
  for (const file of readdirSync(dist, { recursive: true })) {
    if (file.endsWith('.d.ts')) declarationsImportJs(join(dist, file));
  }
  copyReadme(path, target, manifest.name);
  const dependencies = pinTroupe(manifest.dependencies ?? {}, version);
  checkImports(
    manifest.name,
    readdirSync(dist, { recursive: true })
      .filter((file) => file.endsWith('.js'))
      .map((file) => join(dist, file)),
    dependencies,
  );
  const exports = Object.fromEntries(
    Object.entries(manifest.exports ?? {}).map(([key, entry]) => [key, compiledEntry(entry, manifest.name)]),
  );
  const main = exports['.'];
  writeJson(join(target, 'package.json'), {
    name: manifest.name,
    version,
    description: manifest.description,
    license: manifest.license,
    type: 'module',
    engines: ENGINES,
    types: main?.types,
    exports: { ...exports, './package.json': './package.json' },
    files: ['dist', 'README.md', 'LICENSE'],
    sideEffects: manifest.sideEffects,
    dependencies,
  });
  return target;
}

/** `./src/x.ts` in the workspace manifest → `./dist/x.js` with its `./dist/x.d.ts`. */
function compiledEntry(entry, name) {
  const source = typeof entry === 'string' ? entry : entry.default;
  if (typeof source !== 'string' || !/^\.\/src\/.+\.ts$/.test(source)) {
    throw new PackError(`${name}: cannot map export ${JSON.stringify(entry)} to compiled code`);
  }
  const base = source.replace(/^\.\/src\//, './dist/').replace(/\.ts$/, '');
  return { types: `${base}.d.ts`, default: `${base}.js` };
}

/**
 * tsc rewrites `./x.ts` to `./x.js` in the JavaScript it emits (rewriteRelativeImportExtensions) but keeps `.ts`
 * in declarations; a consumer's node16/bundler resolution expects `./x.js` there too, and finds `./x.d.ts` by it.
 */
function declarationsImportJs(file) {
  const text = readFileSync(file, 'utf8');
  const rewritten = text.replace(
    /((?:from|import)\s*\(?\s*)(['"])(\.\.?\/[^'"]+)\.ts\2/g,
    (_, lead, quote, path) => `${lead}${quote}${path}.js${quote}`,
  );
  if (rewritten !== text) writeFileSync(file, rewritten);
}

/**
 * The CLI's tarball: the bundle (without source maps, which would triple its size), bin/troupe.mjs, the pipeline
 * JSON schema for editors, and the dashboard. The gateway finds the dashboard, and its own version, beside the
 * package `@troupe/gateway` (resolved from the bundle's location, wherever it was bundled to), so that package
 * travels inside the CLI's tarball as a bundled dependency holding just its package.json and the built dashboard.
 */
function stageCli(workspaces, version, pins) {
  const { manifest, path } = workspaces.get(CLI);
  const target = join(stage, 'cli');
  const bundle = join(path, 'dist', 'troupe');
  for (const file of readdirSync(bundle, { recursive: true })) {
    if (!file.endsWith('.js')) continue;
    mkdirSync(dirname(join(target, 'dist', 'troupe', file)), { recursive: true });
    const code = readFileSync(join(bundle, file), 'utf8').replace(/\n\/\/# sourceMappingURL=\S+\s*$/, '\n');
    writeFileSync(join(target, 'dist', 'troupe', file), code);
  }
  cpSync(join(path, 'bin'), join(target, 'bin'), { recursive: true });
  mkdirSync(join(target, 'schema'));
  cpSync(
    join(root, 'docs', 'schema', 'pipeline.schema.json'),
    join(target, 'schema', 'pipeline.schema.json'),
  );
  copyReadme(path, target, manifest.name);

  const gateway = workspaces.get(GATEWAY).manifest;
  const bundled = join(target, 'node_modules', gateway.name);
  cpSync(join(root, GATEWAY, 'dashboard', 'dist'), join(bundled, 'dashboard', 'dist'), { recursive: true });
  writeJson(join(bundled, 'package.json'), {
    name: gateway.name,
    version,
    description: "The dashboard's built files, which the gateway inside @troupe/cli serves",
    license: gateway.license,
    type: 'module',
    files: ['dashboard'],
  });

  const files = readdirSync(join(target, 'dist', 'troupe'), { recursive: true })
    .filter((file) => file.endsWith('.js'))
    .map((file) => join(target, 'dist', 'troupe', file));
  const imported = importedPackages(files);
  // A module named only in a string (a loader hook given to module.register) is invisible to the scan, so the
  // CLI's own declared dependencies are kept as well.
  for (const name of Object.keys(manifest.dependencies ?? {})) {
    if (!name.startsWith('@troupe/')) imported.add(name);
  }
  imported.add(gateway.name);
  const dependencies = {};
  for (const name of [...imported].sort()) {
    if (name === gateway.name) {
      dependencies[name] = version;
      continue;
    }
    if (name.startsWith('@troupe/')) {
      throw new PackError(`the CLI bundle imports ${name}, which should have been bundled into it`);
    }
    const pin = pins.get(name);
    if (pin === undefined) {
      throw new PackError(
        `the CLI bundle imports ${name}, which no workspace package declares as a dependency`,
      );
    }
    dependencies[name] = pin.spec;
  }

  writeJson(join(target, 'package.json'), {
    name: manifest.name,
    version,
    description: manifest.description,
    license: manifest.license,
    type: 'module',
    engines: ENGINES,
    bin: { troupe: './bin/troupe.mjs' },
    exports: {
      './package.json': './package.json',
      './schema/pipeline.schema.json': './schema/pipeline.schema.json',
    },
    files: ['bin', 'dist', 'schema', 'README.md', 'LICENSE'],
    dependencies,
    bundleDependencies: [gateway.name],
  });
  return target;
}

/** Fails when compiled code imports an npm package its manifest does not declare. */
function checkImports(name, files, dependencies) {
  for (const imported of importedPackages(files)) {
    if (!(imported in dependencies)) {
      throw new PackError(`${name} imports ${imported}, which its package.json does not declare`);
    }
  }
}

/**
 * The npm packages some files import: each static and dynamic `import` esbuild sees, and each package resolved by
 * name through `createRequire(…).resolve('…')` (which the heartbeat and regex worker threads use).
 */
function importedPackages(files) {
  const { metafile } = scan(files);
  const names = new Set();
  for (const input of Object.values(metafile.inputs)) {
    for (const { path, external } of input.imports) {
      if (external) names.add(path);
    }
  }
  for (const file of files) {
    for (const [, specifier] of readFileSync(file, 'utf8').matchAll(
      /\.resolve\(\s*['"]([^'"./][^'"]*)['"]\s*\)/g,
    )) {
      names.add(specifier);
    }
  }
  const packages = new Set();
  for (const specifier of names) {
    if (specifier.startsWith('node:') || builtinModules.includes(specifier.split('/')[0])) continue;
    const parts = specifier.split('/');
    packages.add(specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]);
  }
  return packages;
}

/** esbuild reads the files (nothing is written) to list what they import; `packages: 'external'` keeps npm out. */
function scan(files) {
  return buildSync({
    entryPoints: files,
    bundle: true,
    write: false,
    metafile: true,
    platform: 'node',
    format: 'esm',
    packages: 'external',
    outdir: join(stage, '.scan'),
    logLevel: 'error',
  });
}

function pinTroupe(dependencies, version) {
  return Object.fromEntries(
    Object.entries(dependencies).map(([name, spec]) => [name, name.startsWith('@troupe/') ? version : spec]),
  );
}

function copyReadme(from, to, name) {
  const file = join(from, 'README.md');
  if (!existsSync(file)) throw new PackError(`${name} has no README.md (${relative(root, file)})`);
  cpSync(file, join(to, 'README.md'));
  // Every package carries the repository's licence text, as Apache-2.0 asks of each copy.
  cpSync(join(root, 'LICENSE'), join(to, 'LICENSE'));
}

function kib(bytes) {
  return `${(bytes / 1024).toFixed(0)} KiB`;
}

function readJson(file) {
  return JSON.parse(readFileSync(file, 'utf8'));
}

function writeJson(file, value) {
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, `${JSON.stringify(value, null, 2)}\n`);
}
