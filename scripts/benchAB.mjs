// Compares two checkouts of Troupe on the same machine: each one's bench bundle is built as scripts/bench.mjs builds
// it (Troupe's packages bundled, npm packages loaded from that checkout's node_modules, run by plain node with
// --expose-gc), then the same bench command runs alternately, A, B, A, B, …, so a change in the machine's load
// falls on both. Every figure a run prints is gathered, and a Markdown table gives each one's median and range.
//
//   node scripts/benchAB.mjs [--runs=3] [--bench-from=<dir>] [--json=<file>] <dirA> <dirB> <bench> [args…]
//
// <bench> is a name in bench/ (`core`, `taskTrace`, …) or a path to a .mts file inside the checkout
// (`apps/coordinator/bench/inProcessRun.mts`). By default each checkout runs its own copy of the bench. With
// --bench-from, both run that checkout's copy, its `@troupe/*` imports bundled from each checkout's packages in
// turn: the same measurement of two builds, when the old bench lacks a figure (only for benches that reach Troupe
// through `@troupe/*`; relative imports come from --bench-from). The bench's fixtures are read beside its source,
// and TROUPE_BENCH_CLI names the checkout's own `troupe` (apps/cli/bin/troupe.mjs, built by `npm ci`) for phases
// that start workers.
//
// A figure is a JSON line `{ figure, value, unit }` (bench/core.mts; other numeric fields of the line but the run's
// size, `tasks`, `workers` and `runs`, become figures of their own, `<figure> › <field>`), any other JSON object line
// (each numeric field but those a figure, as apps/coordinator/bench/inProcessRun.mts prints), taskTrace --summary's lines (the p50,
// the messages per task, the count of each kind, the round trips in a row), or a text line `<name>: <number> [unit]`. The load average is printed before each run: say in any
// note quoting the table whether the machine was shared.
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { build } from 'esbuild';

const options = { runs: 3, benchFrom: undefined, json: undefined };
const positional = [];
const argv = process.argv.slice(2);
while (argv.length > 0) {
  const arg = argv.shift();
  const [key, value] = arg.split(/=(.*)/s, 2);
  if (positional.length < 3 && key === '--runs') options.runs = Number(value);
  else if (positional.length < 3 && key === '--bench-from') options.benchFrom = resolve(value);
  else if (positional.length < 3 && key === '--json') options.json = resolve(value);
  else positional.push(arg);
}
const [dirA, dirB, bench, ...args] = positional;
if (!dirA || !dirB || !bench || !Number.isInteger(options.runs) || options.runs < 1) {
  process.stderr.write(
    'usage: node scripts/benchAB.mjs [--runs=3] [--bench-from=<dir>] [--json=<file>] <dirA> <dirB> <bench> [args…]\n',
  );
  process.exit(2);
}
const benchPath = bench.endsWith('.mts') ? bench : join('bench', `${bench}.mts`);
const checkouts = [
  { label: 'A', dir: resolve(dirA) },
  { label: 'B', dir: resolve(dirB) },
];

/** Bundles the bench for one checkout, into that checkout (so its npm packages load from its node_modules). */
async function bundle(checkout) {
  const sourceRoot = options.benchFrom ?? checkout.dir;
  const entry = join(sourceRoot, benchPath);
  const outfile = join(checkout.dir, dirname(benchPath), 'dist', `ab-${basename(benchPath, '.mts')}.mjs`);
  mkdirSync(dirname(outfile), { recursive: true });
  await build({
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
        name: 'packages-of-the-checkout',
        setup(build) {
          build.onResolve({ filter: /^[^./]/ }, async (resolving) => {
            if (!resolving.path.startsWith('@troupe/')) return { path: resolving.path, external: true };
            if (!options.benchFrom || resolving.pluginData === 'own') return undefined;
            // The bench's `@troupe/*` imports come from the checkout being measured, not from --bench-from.
            const found = await build.resolve(resolving.path, {
              kind: resolving.kind,
              resolveDir: checkout.dir,
              pluginData: 'own',
            });
            return found.errors.length > 0 ? { errors: found.errors } : { path: found.path };
          });
        },
      },
    ],
  });
  return outfile;
}

const figures = new Map(); // name → { unit, A: number[], B: number[] }
function record(label, name, value, unit = '') {
  if (typeof value !== 'number' || !Number.isFinite(value)) return;
  let figure = figures.get(name);
  if (!figure) {
    figure = { unit, A: [], B: [] };
    figures.set(name, figure);
  }
  figure[label].push(value);
}
/** Fields that give a run's size, not a figure. */
const RUN_SIZE = ['tasks', 'workers', 'runs'];
function parseLine(label, line) {
  const trimmed = line.trim();
  if (trimmed.startsWith('{')) {
    let parsed;
    try {
      parsed = JSON.parse(trimmed);
    } catch {
      return;
    }
    if (typeof parsed.figure === 'string' && typeof parsed.value === 'number') {
      record(label, parsed.figure, parsed.value, parsed.unit ?? '');
      for (const [key, value] of Object.entries(parsed)) {
        if (!['figure', 'value', 'unit', ...RUN_SIZE].includes(key))
          record(label, `${parsed.figure} › ${key}`, value);
      }
    } else {
      for (const [key, value] of Object.entries(parsed))
        if (!RUN_SIZE.includes(key)) record(label, key, value);
    }
    return;
  }
  // bench/taskTrace.mts --summary: the task's p50, its messages, a count per kind, the chains of round trips.
  const traced = /^(\d+) task\(s\), p50 (\d+(?:\.\d+)?) ms/.exec(trimmed);
  if (traced) return record(label, 'traced task p50', Number(traced[2]), 'ms');
  const total = /^(\d+) messages, by what they are for/.exec(trimmed);
  if (total) return record(label, 'messages per task', Number(total[1]), 'messages');
  const kind = /^\s*(\d+) {2}\s*(\S.*)$/.exec(line);
  if (kind) return record(label, `messages: ${kind[2]}`, Number(kind[1]), 'messages');
  const chain = /^(\d+) in a row (.+?) \(each sent .*\), (\d+(?:\.\d+)?) ms waiting/.exec(trimmed);
  if (chain) {
    record(label, `round trips in a row ${chain[2]}`, Number(chain[1]), 'trips');
    return record(label, `waiting in a row ${chain[2]}`, Number(chain[3]), 'ms');
  }
  const text = /^([^:{]+?):\s+(-?\d+(?:\.\d+)?)\s*([A-Za-z%/]*)\s*(?:\(|$)/.exec(trimmed);
  if (text) record(label, text[1], Number(text[2]), text[3]);
}

function runOnce(checkout, outfile) {
  return new Promise((resolvePromise) => {
    const child = spawn(process.execPath, ['--expose-gc', outfile, ...args], {
      cwd: checkout.dir,
      env: { ...process.env, TROUPE_BENCH_CLI: join(checkout.dir, 'apps', 'cli', 'bin', 'troupe.mjs') },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let pending = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk) => {
      pending += chunk;
      const lines = pending.split('\n');
      pending = lines.pop() ?? '';
      for (const line of lines) {
        process.stdout.write(`  ${checkout.label}| ${line}\n`);
        parseLine(checkout.label, line);
      }
    });
    child.on('exit', (code, signal) => {
      if (pending) parseLine(checkout.label, pending);
      resolvePromise(signal ? 1 : (code ?? 1));
    });
  });
}

const bundles = [];
for (const checkout of checkouts) bundles.push(await bundle(checkout));
const loads = [];
let failures = 0;
for (let run = 1; run <= options.runs; run++) {
  for (const [i, checkout] of checkouts.entries()) {
    const load = loadavg().map((n) => n.toFixed(2));
    loads.push({ run, label: checkout.label, at: new Date().toISOString(), load });
    console.log(
      `# run ${run}/${options.runs} ${checkout.label} (${checkout.dir}) ${loads.at(-1).at} load ${load.join(' ')}`,
    );
    const code = await runOnce(checkout, bundles[i]);
    if (code !== 0) {
      failures += 1;
      console.log(`# run ${run} ${checkout.label} exited with ${code}`);
    }
  }
}

const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};
const show = (n) => (n === undefined ? '—' : String(Math.round(n * 1000) / 1000));
const spread = (values) =>
  values.length === 0 ? '—' : `${show(Math.min(...values))}–${show(Math.max(...values))} (${values.length})`;
console.log(
  `\nA = ${relative(process.cwd(), checkouts[0].dir) || '.'}, B = ${relative(process.cwd(), checkouts[1].dir) || '.'}`,
);
console.log(
  `${benchPath} ${args.join(' ')}; ${options.runs} run(s) each, alternated; load averages (1/5/15 min) before each run:`,
);
for (const { run, label, at, load } of loads) console.log(`  ${run}${label} ${at} ${load.join(' ')}`);
console.log('\n| figure | unit | A median | A range (runs) | B median | B range (runs) | B / A |');
console.log('| --- | --- | --- | --- | --- | --- | --- |');
for (const [name, { unit, A, B }] of figures) {
  const a = A.length ? median(A) : undefined;
  const b = B.length ? median(B) : undefined;
  const ratio = a && b !== undefined ? `${(b / a).toFixed(2)}` : '—';
  console.log(`| ${name} | ${unit} | ${show(a)} | ${spread(A)} | ${show(b)} | ${spread(B)} | ${ratio} |`);
}
if (options.json) {
  writeFileSync(
    options.json,
    `${JSON.stringify({ bench: benchPath, args, checkouts, loads, figures: Object.fromEntries(figures) }, null, 2)}\n`,
  );
}
if (failures > 0) {
  console.log(`\n${failures} run(s) failed`);
  process.exitCode = 1;
}
