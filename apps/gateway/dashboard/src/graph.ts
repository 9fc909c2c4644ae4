import { html } from 'htm/preact';
import type { Pipeline } from './client.ts';
import { FONT, flowDrawing, H, LINE, nodeNames } from './flowDrawing.ts';
import { fitText } from './textWidth.ts';

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

/** How far the graph shrinks to fit its section before the section scrolls instead, so its text stays readable. */
const MIN_SCALE = 0.6;

/**
 * The pipeline as a graph: its steps left to right (the end last), a parallel step's branches on rows of their own,
 * an arrow for each way the work can go — on, into a branch, to a route's target, and back to the step that reworks
 * it on a reject — with a dot moving along an arrow for each hand-over as it happens, and the steps whose agent is at
 * work lit, saying on what. Each column is as wide as its names and each gap as its labels; a graph wider than its
 * section shrinks to fit it (down to MIN_SCALE), and its labels are drawn over the nodes and arrows, inside the
 * drawing.
 */
export function FlowGraph(props: { pipeline: Pipeline; moves: readonly Move[]; busy: readonly Busy[] }) {
  const graph: NonNullable<Pipeline['graph']> = props.pipeline.graph ?? {
    nodes: props.pipeline.steps.map((id) => ({ id, kind: 'agent', agent: id })),
    edges: props.pipeline.steps.map((id, i) => ({ from: id, to: props.pipeline.steps[i + 1] ?? 'end' })),
  };
  const { width, height, edges, box, path, label } = flowDrawing(graph);
  const x = (id: string) => box(id).x;
  const y = (id: string) => box(id).y;
  const w = (id: string) => box(id).w;
  const cx = (id: string) => x(id) + w(id) / 2;
  return html`<svg
    class="flow"
    data-testid="flow-graph"
    viewBox="0 0 ${width} ${height}"
    width=${width}
    height=${height}
    style=${`max-width: ${width}px; min-width: ${Math.round(width * MIN_SCALE)}px`}
    role="img"
    aria-label=${`flow of ${props.pipeline.name}`}
  >
    <defs>
      <marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto">
        <path d="M0,0 L10,5 L0,10 z" class="arrowhead" />
      </marker>
    </defs>
    ${edges.map(
      (e) => html`<g class=${`edge ${e.whens.join(' ')}`}>
        <path d=${path(e.from, e.to)} marker-end="url(#arrow)" />
      </g>`,
    )}
    ${graph.nodes.map((n) => {
      const busy = props.busy.filter((b) => b.step === n.id);
      const { step, agent } = nodeNames(n);
      return html`<g class=${`node ${busy.length > 0 ? 'busy' : ''}`} data-testid=${`node-${n.id}`}>
        <rect x=${x(n.id)} y=${y(n.id)} width=${w(n.id)} height=${H} rx=${n.kind === 'route' ? 2 : 10} class=${n.kind} />
        <text x=${cx(n.id)} y=${y(n.id) + 22} class="step">${fitText(step, FONT.step, w(n.id) - 12)}</text>
        <text x=${cx(n.id)} y=${y(n.id) + 40} class="agent">${fitText(agent, FONT.agent, w(n.id) - 12)}</text>
        <title>${`${n.id} · ${agent}${n.when ? `\nruns when ${n.when}` : ''}`}</title>
        ${busy
          .slice(0, 1)
          .map(
            (b) => html`<text x=${cx(n.id)} y=${y(n.id) - 10} class=${`doing ${b.what}`}>${b.label}</text>`,
          )}
      </g>`;
    })}
    <g class="node end">
      <rect x=${x('end')} y=${y('end') + 8} width=${w('end')} height=${H - 16} rx="20" />
      <text x=${cx('end')} y=${y('end') + H / 2 + 5} class="step">end</text>
    </g>
    ${edges
      .filter((e) => e.lines.length > 0)
      .map((e) => {
        const spot = label(e);
        return html`<g class=${`edge label ${e.whens.join(' ')}`} data-testid="edge-label">
          <text x=${spot.x} y=${spot.y}>${e.lines.map((line, i) => html`<tspan x=${spot.x} dy=${i === 0 ? 0 : LINE}>${line}</tspan>`)}</text>
          <title>${e.whens.join(' · ')}</title>
        </g>`;
      })}
    ${props.moves.map(
      (m) => html`<circle key=${m.key} r="7" class=${`message ${m.rework ? 'rework' : ''}`}>
        <animateMotion dur="1.2s" fill="freeze" path=${path(m.from, m.to)} />
      </circle>`,
    )}
  </svg>`;
}
