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
const TOP = 40;

/**
 * The pipeline as a graph: its steps left to right (the end last), an arrow for each way the work can go — on, and
 * back to the step that reworks it on a reject — with a dot moving along an arrow for each hand-over as it
 * happens, and the steps whose agent is at work lit, saying on what.
 */
export function FlowGraph(props: { pipeline: Pipeline; moves: readonly Move[]; busy: readonly Busy[] }) {
  const graph: NonNullable<Pipeline['graph']> = props.pipeline.graph ?? {
    nodes: props.pipeline.steps.map((id) => ({ id, kind: 'agent', agent: id })),
    edges: props.pipeline.steps.map((id, i) => ({ from: id, to: props.pipeline.steps[i + 1] ?? 'end' })),
  };
  const ids = [...graph.nodes.map((n) => n.id), 'end'];
  const x = (id: string) => 20 + ids.indexOf(id) * (W + GAP);
  const width = 40 + ids.length * (W + GAP) - GAP;
  const backEdges = graph.edges.filter((e) => ids.indexOf(e.to) <= ids.indexOf(e.from));
  const deepest = Math.max(0, ...backEdges.map((e) => ids.indexOf(e.from) - ids.indexOf(e.to)));
  const height = TOP + H + (backEdges.length > 0 ? 50 + 10 * deepest : 16);
  const path = (from: string, to: string) => {
    const a = ids.indexOf(from);
    const b = ids.indexOf(to);
    if (b > a) return `M ${x(from) + W} ${TOP + H / 2} L ${x(to)} ${TOP + H / 2}`;
    // Back to an earlier step: an arc below the row.
    const depth = TOP + H + 30 + 10 * (a - b);
    return `M ${x(from) + W / 2} ${TOP + H} C ${x(from) + W / 2} ${depth}, ${x(to) + W / 2} ${depth}, ${x(to) + W / 2} ${TOP + H}`;
  };
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
        ${
          e.when
            ? html`<text
              x=${(x(e.from) + x(e.to) + W) / 2}
              y=${ids.indexOf(e.to) > ids.indexOf(e.from) ? TOP + H / 2 - 8 : TOP + H + 26 + 10 * (ids.indexOf(e.from) - ids.indexOf(e.to))}
              >${e.when}</text
            >`
            : null
        }
      </g>`,
    )}
    ${graph.nodes.map((n) => {
      const busy = props.busy.filter((b) => b.step === n.id);
      return html`<g class=${`node ${busy.length > 0 ? 'busy' : ''}`} data-testid=${`node-${n.id}`}>
        <rect x=${x(n.id)} y=${TOP} width=${W} height=${H} rx="10" />
        <text x=${x(n.id) + W / 2} y=${TOP + 22} class="step">${n.id}</text>
        <text x=${x(n.id) + W / 2} y=${TOP + 40} class="agent">${n.agent}${n.kind === 'review' ? ' · review' : ''}</text>
        ${busy
          .slice(0, 1)
          .map(
            (b) =>
              html`<text x=${x(n.id) + W / 2} y=${TOP - 10} class=${`doing ${b.what}`}>${b.label}</text>`,
          )}
      </g>`;
    })}
    <g class="node end">
      <rect x=${x('end')} y=${TOP + 8} width=${W} height=${H - 16} rx="20" />
      <text x=${x('end') + W / 2} y=${TOP + H / 2 + 5} class="step">end</text>
    </g>
    ${props.moves.map(
      (m) => html`<circle key=${m.key} r="7" class=${`message ${m.rework ? 'rework' : ''}`}>
        <animateMotion dur="1.2s" fill="freeze" path=${path(m.from, m.to)} />
      </circle>`,
    )}
  </svg>`;
}
