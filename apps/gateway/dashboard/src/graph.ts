import { html } from 'htm/preact';
import type { Pipeline } from './client.ts';

/** A message moving between two steps of the flow: a task going on to the next step, or back to rework. */
export interface Move {
  key: string;
  from: string;
  to: string;
  rework: boolean;
}

/** What a step's agent is doing now, to light its node up. */
export interface Busy {
  step: string;
  what: 'model' | 'tool' | 'person' | 'agent';
  label: string;
}

const W = 150;
const H = 56;
const GAP = 60;
const ROW = H + 44;
const TOP = 40;

type Node = NonNullable<Pipeline['graph']>['nodes'][number];

/**
 * Where each step is drawn: a column per step along the flow, and a row per branch — a parallel step's branches side
 * by side below one another, starting in the column after it, the step after the parallel one past its longest
 * branch; a foreach step's steps likewise, as its one branch. The end comes last, on the first row.
 */
function layout(nodes: readonly Node[]): {
  pos: Map<string, { col: number; row: number }>;
  cols: number;
  rows: number;
} {
  const pos = new Map<string, { col: number; row: number }>();
  const listOf = (parent: string | undefined, branch: string | undefined) =>
    nodes.filter((n) => n.parent === parent && n.branch === branch);
  const branchesOf = (node: Node) => [
    ...new Set(nodes.filter((n) => n.parent === node.id).map((n) => n.branch as string)),
  ];
  /** A parallel step (its branches) or a foreach step (its one branch, `each`): drawn with its steps after it. */
  const holdsSteps = (node: Node) => node.kind === 'parallel' || node.kind === 'foreach';
  /** How many rows a list of steps takes: one, or its widest parallel step's branches stacked. */
  const height = (list: readonly Node[]): number =>
    Math.max(
      1,
      ...list.map((n) =>
        holdsSteps(n) ? branchesOf(n).reduce((sum, b) => sum + height(listOf(n.id, b)), 0) : 1,
      ),
    );
  /** Places a list from `col` on `row`; returns the column after it. */
  const place = (list: readonly Node[], start: number, row: number): number => {
    let col = start;
    for (const node of list) {
      pos.set(node.id, { col, row });
      if (!holdsSteps(node)) {
        col += 1;
        continue;
      }
      let after = col + 1;
      let branchRow = row;
      for (const branch of branchesOf(node)) {
        const steps = listOf(node.id, branch);
        after = Math.max(after, place(steps, col + 1, branchRow));
        branchRow += height(steps);
      }
      col = after;
    }
    return col;
  };
  const top = listOf(undefined, undefined);
  const end = place(top, 0, 0);
  pos.set('end', { col: end, row: 0 });
  return { pos, cols: end + 1, rows: height(top) };
}

/**
 * The pipeline as a graph: its steps left to right (the end last), a parallel step's branches on rows of their own,
 * an arrow for each way the work can go — on, into a branch, to a route's target, and back to the step that reworks
 * it on a reject — with a dot moving along an arrow for each hand-over as it happens, and the steps whose agent is at
 * work lit, saying on what.
 */
export function FlowGraph(props: { pipeline: Pipeline; moves: readonly Move[]; busy: readonly Busy[] }) {
  const graph: NonNullable<Pipeline['graph']> = props.pipeline.graph ?? {
    nodes: props.pipeline.steps.map((id) => ({ id, kind: 'agent', agent: id })),
    edges: props.pipeline.steps.map((id, i) => ({ from: id, to: props.pipeline.steps[i + 1] ?? 'end' })),
  };
  const { pos, cols, rows } = layout(graph.nodes);
  const at = (id: string) => pos.get(id) ?? { col: 0, row: 0 };
  /** A forward edge that passes over steps of its row (a route's target, a `next`) arcs above them. */
  const span = (e: { from: string; to: string }) =>
    at(e.to).row === at(e.from).row ? at(e.to).col - at(e.from).col : 0;
  const arc = (e: { from: string; to: string }) => 18 + 8 * span(e);
  const lift = Math.max(0, ...graph.edges.filter((e) => span(e) > 1).map(arc));
  const x = (id: string) => 20 + at(id).col * (W + GAP);
  const y = (id: string) => TOP + lift + at(id).row * ROW;
  const width = 40 + cols * (W + GAP) - GAP;
  const back = (e: { from: string; to: string }) => at(e.to).col <= at(e.from).col;
  const backEdges = graph.edges.filter(back);
  const deepest = Math.max(0, ...backEdges.map((e) => at(e.from).col - at(e.to).col));
  const height = TOP + lift + (rows - 1) * ROW + H + (backEdges.length > 0 ? 50 + 10 * deepest : 16);
  const path = (from: string, to: string) => {
    if (span({ from, to }) > 1) {
      const top = y(from) - arc({ from, to });
      return `M ${x(from) + W / 2} ${y(from)} C ${x(from) + W / 2} ${top}, ${x(to) + W / 2} ${top}, ${x(to) + W / 2} ${y(to)}`;
    }
    if (!back({ from, to })) {
      const [x1, y1, x2, y2] = [x(from) + W, y(from) + H / 2, x(to), y(to) + H / 2];
      if (y1 === y2) return `M ${x1} ${y1} L ${x2} ${y2}`;
      const mid = (x1 + x2) / 2;
      return `M ${x1} ${y1} C ${mid} ${y1}, ${mid} ${y2}, ${x2} ${y2}`;
    }
    // Back to an earlier step: an arc below both.
    const depth = Math.max(y(from), y(to)) + H + 30 + 10 * (at(from).col - at(to).col);
    return `M ${x(from) + W / 2} ${y(from) + H} C ${x(from) + W / 2} ${depth}, ${x(to) + W / 2} ${depth}, ${x(to) + W / 2} ${y(to) + H}`;
  };
  const label = (e: { from: string; to: string }) =>
    span(e) > 1
      ? { x: (x(e.from) + x(e.to) + W) / 2, y: y(e.from) - arc(e) + 4 }
      : back(e)
        ? {
            x: (x(e.from) + x(e.to) + W) / 2,
            y: Math.max(y(e.from), y(e.to)) + H + 26 + 10 * (at(e.from).col - at(e.to).col),
          }
        : { x: (x(e.from) + W + x(e.to)) / 2, y: (y(e.from) + y(e.to)) / 2 + H / 2 - 8 };
  return html`<svg
    class="flow"
    data-testid="flow-graph"
    viewBox="0 0 ${width} ${height}"
    width=${width}
    height=${height}
    role="img"
    aria-label=${`flow of ${props.pipeline.name}`}
  >
    <defs>
      <marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto">
        <path d="M0,0 L10,5 L0,10 z" class="arrowhead" />
      </marker>
    </defs>
    ${graph.edges.map(
      (e) => html`<g class=${`edge ${e.when ?? ''}`}>
        <path d=${path(e.from, e.to)} marker-end="url(#arrow)" />
        ${e.when ? html`<text x=${label(e).x} y=${label(e).y}>${e.when}</text>` : null}
      </g>`,
    )}
    ${graph.nodes.map((n) => {
      const busy = props.busy.filter((b) => b.step === n.id);
      return html`<g class=${`node ${busy.length > 0 ? 'busy' : ''}`} data-testid=${`node-${n.id}`}>
        <rect x=${x(n.id)} y=${y(n.id)} width=${W} height=${H} rx=${n.kind === 'route' ? 2 : 10} class=${n.kind} />
        <text x=${x(n.id) + W / 2} y=${y(n.id) + 22} class="step">${n.id}${n.when ? ' ?' : ''}</text>
        <text x=${x(n.id) + W / 2} y=${y(n.id) + 40} class="agent">${n.agent}${n.kind === 'review' ? ' · review' : ''}</text>
        ${n.when ? html`<title>runs when ${n.when}</title>` : null}
        ${busy
          .slice(0, 1)
          .map(
            (b) =>
              html`<text x=${x(n.id) + W / 2} y=${y(n.id) - 10} class=${`doing ${b.what}`}>${b.label}</text>`,
          )}
      </g>`;
    })}
    <g class="node end">
      <rect x=${x('end')} y=${y('end') + 8} width=${W} height=${H - 16} rx="20" />
      <text x=${x('end') + W / 2} y=${y('end') + H / 2 + 5} class="step">end</text>
    </g>
    ${props.moves.map(
      (m) => html`<circle key=${m.key} r="7" class=${`message ${m.rework ? 'rework' : ''}`}>
        <animateMotion dur="1.2s" fill="freeze" path=${path(m.from, m.to)} />
      </circle>`,
    )}
  </svg>`;
}
