// Where heap went between two snapshots of one process (bench/parkedHeap.mts writes them): the objects of the second
// whose ids the first does not have, per unit of work (N: e.g. the tasks parked in between), grouped by kind
// (type:constructor), by kind and first retainer (the object and property that holds it first), and by owner: the
// nearest object up the chain of first retainers whose class has a name of its own (an Actor, a StepRun, a Timeout…;
// a plain object, array, closure context, promise, Map or Set is passed through) and the property it holds the chain
// by, which sums what each part of a parked task keeps, however deep (an object that holds itself, as XState's
// `actor.ref` does, is not its own retainer).
//
//   node --max-old-space-size=6000 bench/heapSnapshotDiff.mjs before.heapsnapshot after.heapsnapshot N
import { readFileSync } from 'node:fs';

const load = (f) => {
  const s = JSON.parse(readFileSync(f, 'utf8'));
  const m = s.snapshot.meta;
  const nf = m.node_fields.length,
    ef = m.edge_fields.length;
  const types = m.node_types[0],
    etypes = m.edge_types[0];
  const iT = m.node_fields.indexOf('type'),
    iN = m.node_fields.indexOf('name'),
    iI = m.node_fields.indexOf('id'),
    iS = m.node_fields.indexOf('self_size'),
    iE = m.node_fields.indexOf('edge_count');
  const eT = m.edge_fields.indexOf('type'),
    eN = m.edge_fields.indexOf('name_or_index'),
    eTo = m.edge_fields.indexOf('to_node');
  return { s, nf, ef, types, etypes, iT, iN, iI, iS, iE, eT, eN, eTo };
};
const [bf, af, nArg] = process.argv.slice(2);
const N = Number(nArg);
const B = load(bf);
const ids = new Set();
for (let i = 0; i < B.s.nodes.length; i += B.nf) ids.add(B.s.nodes[i + B.iI]);
B.s = null;
const A = load(af);
const { nodes, edges, strings } = A.s;
const count = nodes.length / A.nf;
const label = (n) => {
  const t = A.types[nodes[n * A.nf + A.iT]];
  let name = strings[nodes[n * A.nf + A.iN]];
  if (t === 'string' || t === 'concatenated string' || t === 'sliced string') name = '';
  if (t === 'closure') name = `fn ${name}`;
  return `${t}:${name}`.slice(0, 90);
};
// first retainer (non-weak) of each node
const firstEdge = new Uint32Array(count);
let e = 0;
for (let n = 0; n < count; n++) {
  firstEdge[n] = e;
  e += nodes[n * A.nf + A.iE] * A.ef;
}
const retainer = new Int32Array(count).fill(-1);
const retEdge = new Int32Array(count).fill(-1);
for (let n = 0; n < count; n++) {
  const end = n + 1 < count ? firstEdge[n + 1] : edges.length;
  for (let x = firstEdge[n]; x < end; x += A.ef) {
    const et = A.etypes[edges[x + A.eT]];
    if (et === 'weak' || et === 'shortcut') continue;
    const to = edges[x + A.eTo] / A.nf;
    if (to !== n && retainer[to] === -1) {
      retainer[to] = n;
      retEdge[to] = x;
    }
  }
}
const plain = new Set(['Object', 'Array', 'Promise', 'Map', 'Set', 'system / Context']);
/** The owner an object is counted under: a named class's object, or a named function. */
const ownerName = (n) => {
  const t = A.types[nodes[n * A.nf + A.iT]];
  const name = strings[nodes[n * A.nf + A.iN]];
  if (t === 'closure') return name === '' ? undefined : `fn ${name}`;
  if (t !== 'object' || plain.has(name) || name.startsWith('system')) return undefined;
  return name;
};
const edgeName = (x) => {
  const et = A.etypes[edges[x + A.eT]];
  return et === 'element' || et === 'hidden' ? '[]' : strings[edges[x + A.eN]];
};
const by = new Map(),
  byRet = new Map(),
  byOwner = new Map();
let total = 0;
for (let n = 0; n < count; n++) {
  if (ids.has(nodes[n * A.nf + A.iI])) continue;
  const size = nodes[n * A.nf + A.iS];
  total += size;
  const l = label(n);
  const g = by.get(l) ?? [0, 0];
  g[0] += size;
  g[1]++;
  by.set(l, g);
  const r = retainer[n];
  let rl = r >= 0 ? label(r) : '-';
  if (r >= 0) {
    const x = retEdge[n];
    const et = A.etypes[edges[x + A.eT]];
    const nm = et === 'element' || et === 'hidden' ? '[]' : strings[edges[x + A.eN]];
    rl += `.${nm}`;
  }
  const k = `${l}  <-  ${rl}`;
  const h = byRet.get(k) ?? [0, 0];
  h[0] += size;
  h[1]++;
  byRet.set(k, h);
  let at = n;
  let via = '';
  let owner = ownerName(n);
  for (let depth = 0; owner === undefined && retainer[at] >= 0 && depth < 16; depth++) {
    via = edgeName(retEdge[at]);
    at = retainer[at];
    owner = ownerName(at);
  }
  const o = `${owner ?? `(none: ${label(at)})`}${via === '' ? '' : ` .${via}`}`;
  const g2 = byOwner.get(o) ?? [0, 0];
  g2[0] += size;
  g2[1]++;
  byOwner.set(o, g2);
}
const show = (m, k) =>
  [...m]
    .sort((a, b) => b[1][0] - a[1][0])
    .slice(0, k)
    .map(
      ([l, [s, c]]) =>
        `${(s / N).toFixed(0).padStart(7)} B/task ${(c / N).toFixed(1).padStart(6)} obj/task  ${l}`,
    )
    .join('\n');
console.log(`new objects total: ${(total / N / 1024).toFixed(2)} KB/task`);
console.log('--- by kind');
console.log(show(by, 45));
console.log('--- by kind <- first retainer');
console.log(show(byRet, 70));
console.log('--- by owner .property');
console.log(show(byOwner, 45));
