// Sums a V8 .cpuprofile (from `node --cpu-prof`) by function: the top entries by self time and by inclusive time
// (a function's time counted once per sample however often it recurs on the stack), with each one's share of the
// sampled time.
//
//   node bench/profileTop.mjs <file.cpuprofile | dir> [top=15] [filter]
//
// A directory means its largest .cpuprofile (the main thread's; the heartbeat worker's is nearly all idle).
// `filter` keeps only inclusive entries whose name or file contains it (e.g. `parse` or `protocol/`).
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';

const [target, topArg = '15', filter] = process.argv.slice(2);
if (target === undefined) {
  console.error('usage: node bench/profileTop.mjs <file.cpuprofile | dir> [top=15] [filter]');
  process.exit(2);
}
const file = statSync(target).isDirectory() ? largestProfile(target) : target;
const top = Number(topArg);
const profile = JSON.parse(readFileSync(file, 'utf8'));

/** A function's name for the tables: its name, and where it is defined when that tells functions apart. */
const nameOf = ({ callFrame: { functionName, url, lineNumber } }) => {
  const where = url === '' ? '' : ` ${shortUrl(url)}:${lineNumber + 1}`;
  return `${functionName === '' ? '(anonymous)' : functionName}${where}`;
};
const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
const parentOf = new Map();
for (const node of profile.nodes) for (const child of node.children ?? []) parentOf.set(child, node.id);

// Each sample's duration is the gap to the next one.
const sampleMs = new Map();
let totalMs = 0;
for (let i = 0; i < profile.samples.length; i++) {
  const ms = (profile.timeDeltas[i + 1] ?? 0) / 1000;
  const id = profile.samples[i];
  sampleMs.set(id, (sampleMs.get(id) ?? 0) + ms);
  totalMs += ms;
}

const self = new Map();
const inclusive = new Map();
for (const [id, ms] of sampleMs) {
  const leaf = nameOf(nodes.get(id));
  self.set(leaf, (self.get(leaf) ?? 0) + ms);
  const seen = new Set();
  for (let at = id; at !== undefined; at = parentOf.get(at)) {
    const name = nameOf(nodes.get(at));
    if (seen.has(name)) continue;
    seen.add(name);
    inclusive.set(name, (inclusive.get(name) ?? 0) + ms);
  }
}

const table = (title, sums, keep = () => true) => {
  console.log(`\n${title}`);
  console.log('| # | ms | % | function |\n|---|---|---|---|');
  [...sums]
    .filter(([name]) => keep(name))
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)
    .forEach(([name, ms], i) => {
      console.log(`| ${i + 1} | ${ms.toFixed(0)} | ${((100 * ms) / totalMs).toFixed(1)} | \`${name}\` |`);
    });
};

console.log(`${basename(file)}: ${totalMs.toFixed(0)} ms sampled`);
table('self time', self);
table(
  filter === undefined ? 'inclusive time' : `inclusive time, entries matching "${filter}"`,
  inclusive,
  (name) => filter === undefined || name.includes(filter),
);

function largestProfile(dir) {
  const files = readdirSync(dir)
    .filter((name) => name.endsWith('.cpuprofile'))
    .map((name) => join(dir, name));
  if (files.length === 0) throw new Error(`no .cpuprofile in ${dir}`);
  return files.sort((a, b) => statSync(b).size - statSync(a).size)[0];
}

function shortUrl(url) {
  const path = url.replace(/^file:\/\//, '');
  const inModules = path.lastIndexOf('node_modules/');
  return inModules === -1 ? basename(path) : path.slice(inModules + 'node_modules/'.length);
}
