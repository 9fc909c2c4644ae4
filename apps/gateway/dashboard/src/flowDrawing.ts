import type { Pipeline } from './client.ts';
import { fitText, textWidth } from './textWidth.ts';

/** A node's height, a row's (with the room between rows), the room above the first row and around the drawing. */
export const H = 56;
const ROW = H + 44;
const TOP = 40;
const MARGIN = 20;
/** A node is as wide as its labels need, within these bounds; a column as wide as its widest node. */
const MIN_W = 110;
const MAX_W = 220;
const NODE_PAD = 28;
/** The gap between two columns: room for an arrow, or for the widest edge label drawn in it. */
const MIN_GAP = 40;
const LABEL_PAD = 20;
/** An edge label's lines are at most this wide; a longer label goes on two lines, then is cut (its title has it all). */
const LABEL_MAX = 150;
export const LINE = 13;
/** The fonts style.css gives the graph's texts, for measuring them. */
export const FONT = { step: '600 13px', agent: '12px', edge: '11px' } as const;

export type Node = NonNullable<Pipeline['graph']>['nodes'][number];

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

type Edge = NonNullable<Pipeline['graph']>['edges'][number];

/** Edges between the same two steps are drawn once, with their conditions in one label (`answered · timeout`). */
function merged(edges: readonly Edge[]): { from: string; to: string; whens: string[] }[] {
  const byEnds = new Map<string, { from: string; to: string; whens: string[] }>();
  for (const e of edges) {
    const key = `${e.from}\u0000${e.to}`;
    const seen = byEnds.get(key) ?? { from: e.from, to: e.to, whens: [] };
    if (e.when !== undefined) seen.whens.push(e.when);
    byEnds.set(key, seen);
  }
  return [...byEnds.values()];
}

/**
 * An edge label in lines of at most LABEL_MAX pixels: one, or two cut at a space (a dot only when no space will do),
 * the narrower the better.
 */
function labelLines(text: string): string[] {
  const width = (t: string) => textWidth(t, FONT.edge);
  if (width(text) <= LABEL_MAX) return [text];
  const cuts: { lines: string[]; widest: number; rank: number }[] = [];
  for (let i = 1; i < text.length - 1; i++) {
    if (text[i] !== ' ' && text[i] !== '.') continue;
    const lines = [text.slice(0, i), text.slice(text[i] === ' ' ? i + 1 : i)];
    const widest = Math.max(...lines.map(width));
    cuts.push({ lines, widest, rank: (widest > LABEL_MAX ? 2 : 0) + (text[i] === '.' ? 1 : 0) });
  }
  const best = cuts.sort((a, b) => a.rank - b.rank || a.widest - b.widest)[0];
  return (best?.lines ?? [text]).map((line) => fitText(line, FONT.edge, LABEL_MAX));
}

/** A node's names as drawn: its step (marked `?` when it runs on a condition) and its agent. */
export const nodeNames = (n: Node) => ({
  step: `${n.id}${n.when ? ' ?' : ''}`,
  agent: `${n.agent}${n.kind === 'review' ? ' · review' : ''}`,
});

/** An edge as drawn: its ends, its conditions, and its label's lines. */
export interface DrawnEdge {
  from: string;
  to: string;
  whens: string[];
  lines: string[];
}

/** The geometry of a flow graph: its size, each node's box, each arrow's path and each label's place. */
export interface FlowDrawing {
  width: number;
  height: number;
  edges: DrawnEdge[];
  box: (id: string) => { x: number; y: number; w: number };
  path: (from: string, to: string) => string;
  label: (e: DrawnEdge) => { x: number; y: number };
}

/**
 * Where a flow graph's nodes, arrows and labels go, before anything is drawn: a column per step along the flow, a row
 * per branch, each column as wide as its names and each gap as the labels drawn in it.
 */
export function flowDrawing(graph: NonNullable<Pipeline['graph']>): FlowDrawing {
  const { pos, cols, rows } = layout(graph.nodes);
  const at = (id: string) => pos.get(id) ?? { col: 0, row: 0 };
  const edges = merged(graph.edges).map((e) => ({
    ...e,
    lines: e.whens.length > 0 ? labelLines(e.whens.join(' · ')) : [],
  }));
  /** A forward edge that passes over steps of its row (a route's target, a `next`) arcs above them. */
  const span = (e: { from: string; to: string }) =>
    at(e.to).row === at(e.from).row ? at(e.to).col - at(e.from).col : 0;
  const back = (e: { from: string; to: string }) => at(e.to).col <= at(e.from).col;
  const arc = (e: { from: string; to: string }) => 18 + 8 * span(e);
  /** How far below the steps it passes a rework's line runs: the further back it goes, the deeper, so they nest. */
  const under = (e: { from: string; to: string }) => 20 + 10 * (at(e.from).col - at(e.to).col);
  /** Where a label sits: over an arc, under a rework's arc, or in the gap before the step an arrow goes to. */
  const placeOf = (e: { from: string; to: string }) => (span(e) > 1 ? 'over' : back(e) ? 'under' : 'gap');

  // Columns as wide as their nodes' names, gaps as wide as the labels drawn in them.
  const colW = Array.from({ length: cols }, () => MIN_W);
  for (const n of graph.nodes) {
    const { step, agent } = nodeNames(n);
    const need = Math.max(textWidth(step, FONT.step), textWidth(agent, FONT.agent)) + NODE_PAD;
    const col = at(n.id).col;
    colW[col] = Math.min(MAX_W, Math.max(colW[col] ?? MIN_W, need));
  }
  const gap = Array.from({ length: cols }, () => MIN_GAP);
  for (const e of edges) {
    if (e.lines.length === 0 || placeOf(e) !== 'gap') continue;
    const before = at(e.to).col - 1;
    const need = Math.max(...e.lines.map((l) => textWidth(l, FONT.edge))) + LABEL_PAD;
    gap[before] = Math.max(gap[before] ?? MIN_GAP, need);
  }
  const colX: number[] = [];
  for (let c = 0, left = MARGIN; c < cols; c++) {
    colX.push(left);
    left += (colW[c] ?? MIN_W) + (gap[c] ?? MIN_GAP);
  }
  const w = (id: string) => colW[at(id).col] ?? MIN_W;
  const x = (id: string) => colX[at(id).col] ?? MARGIN;
  const cx = (id: string) => x(id) + w(id) / 2;

  const lift = Math.max(
    0,
    ...edges.filter((e) => span(e) > 1).map((e) => arc(e) + Math.max(0, e.lines.length - 1) * LINE),
  );
  const y = (id: string) => TOP + lift + at(id).row * ROW;
  /** The top of the lowest node in the columns a rework's arc spans: the arc passes below it, not through it. */
  const floor = (e: { from: string; to: string }) => {
    const [first, last] = [at(e.to).col, at(e.from).col];
    const spanned = [...pos.values()].filter((p) => p.col >= first && p.col <= last);
    return TOP + lift + Math.max(0, ...spanned.map((p) => p.row)) * ROW;
  };
  const width = (colX[cols - 1] ?? MARGIN) + (colW[cols - 1] ?? MIN_W) + MARGIN;
  // Down to the lowest row, or to the last line of the lowest rework's label.
  const height = Math.max(
    TOP + lift + (rows - 1) * ROW + H + 16,
    ...edges.filter(back).map((e) => floor(e) + H + under(e) + 14 + (e.lines.length - 1) * LINE + 10),
  );
  const path = (from: string, to: string) => {
    if (span({ from, to }) > 1) {
      const top = y(from) - arc({ from, to });
      return `M ${cx(from)} ${y(from)} C ${cx(from)} ${top}, ${cx(to)} ${top}, ${cx(to)} ${y(to)}`;
    }
    if (!back({ from, to })) {
      const [x1, y1, x2, y2] = [x(from) + w(from), y(from) + H / 2, x(to), y(to) + H / 2];
      if (y1 === y2) return `M ${x1} ${y1} L ${x2} ${y2}`;
      const mid = (x1 + x2) / 2;
      return `M ${x1} ${y1} C ${mid} ${y1}, ${mid} ${y2}, ${x2} ${y2}`;
    }
    // Back to an earlier step: down, along below every step between them, and up, with rounded corners.
    const level = floor({ from, to }) + H + under({ from, to });
    const [fx, tx, r] = [cx(from), cx(to), 12];
    return `M ${fx} ${y(from) + H} L ${fx} ${level - r} Q ${fx} ${level} ${fx - r} ${level} L ${tx + r} ${level} Q ${tx} ${level} ${tx} ${level - r} L ${tx} ${y(to) + H}`;
  };
  /** The first line's baseline; further lines go up over an arc, down elsewhere. */
  const label = (e: { from: string; to: string; lines: string[] }) => {
    const more = (e.lines.length - 1) * LINE;
    switch (placeOf(e)) {
      case 'over':
        return { x: (cx(e.from) + cx(e.to)) / 2, y: y(e.from) - arc(e) + 4 - more };
      case 'under':
        return { x: (cx(e.from) + cx(e.to)) / 2, y: floor(e) + H + under(e) + 14 };
      default:
        return { x: x(e.to) - (gap[at(e.to).col - 1] ?? MIN_GAP) / 2, y: y(e.to) + H / 2 - 6 - more };
    }
  };
  return { width, height, edges, box: (id) => ({ x: x(id), y: y(id), w: w(id) }), path, label };
}
