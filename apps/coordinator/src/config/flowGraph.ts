import type { FlowGraph } from '@troupe/protocol';
import { ROUTE_END } from './checkFlow.ts';
import { actorOf } from './flowLayout.ts';
import type { PipelineConfig, StepConfig } from './pipelineSchema.ts';

/** The branch a foreach step's `do` steps are drawn in. */
export const FOREACH_BRANCH = 'each';

/** The end of every flow, as an edge's `to`. */
export const FLOW_END = 'end';

export function flowGraph(config: Pick<PipelineConfig, 'flow'>): FlowGraph {
  const nodes: FlowGraph['nodes'] = [];
  const edges: FlowGraph['edges'] = [];
  const walk = (list: readonly StepConfig[], exit: string, within?: { parent: string; branch: string }) => {
    list.forEach((step, i) => {
      const after = (id: string) => (id === ROUTE_END ? exit : id);
      const next = step.next !== undefined ? after(step.next) : (list[i + 1]?.id ?? exit);
      nodes.push({
        id: step.id,
        kind: step.kind,
        agent: step.kind === 'pipeline' ? `pipeline ${step.pipeline}` : actorOf(step),
        ...within,
        ...(step.when === undefined ? {} : { when: step.when }),
      });
      switch (step.kind) {
        case 'agent':
          edges.push({ from: step.id, to: next });
          break;
        case 'pipeline':
          edges.push({ from: step.id, to: next });
          break;
        case 'human':
          edges.push({ from: step.id, to: next, ...(step.onTimeout === 'fail' ? {} : { when: 'answered' }) });
          if (step.onTimeout !== 'fail') {
            edges.push({
              from: step.id,
              to: step.onTimeout === 'continue' ? next : after(step.onTimeout),
              when: 'timeout',
            });
          }
          break;
        case 'review':
          edges.push({ from: step.id, to: next, when: 'approve' });
          edges.push({ from: step.id, to: step.onReject, when: 'reject' });
          break;
        case 'route': {
          for (const [value, target] of Object.entries(step.cases ?? {})) {
            edges.push({ from: step.id, to: after(target), when: `= ${value}` });
          }
          if (step.default !== undefined)
            edges.push({ from: step.id, to: after(step.default), when: 'default' });
          for (const target of Object.keys(step.targets ?? {})) {
            edges.push({ from: step.id, to: after(target), when: `${step.agent} picks` });
          }
          break;
        }
        case 'parallel':
          for (const [branch, steps] of Object.entries(step.branches)) {
            edges.push({ from: step.id, to: (steps[0] as StepConfig).id, when: `branch ${branch}` });
            walk(steps, next, { parent: step.id, branch });
          }
          break;
        case 'foreach':
          // Drawn as a parallel step with one branch, which runs once for each item.
          edges.push({ from: step.id, to: (step.do[0] as StepConfig).id, when: `each of ${step.items}` });
          walk(step.do, next, { parent: step.id, branch: FOREACH_BRANCH });
          break;
      }
    });
  };
  walk(config.flow, FLOW_END);
  return { nodes, edges };
}

/**
 * The graph as a Mermaid flowchart (what `troupe graph` prints): each step a node naming its agent, each parallel
 * step a subgraph with one per branch, conditional steps marked `when`, and the edges labelled as in the graph.
 */
export function flowMermaid(graph: FlowGraph): string {
  const lines = ['flowchart TD', '  start([start])'];
  const label = (node: FlowGraph['nodes'][number]) => {
    const what =
      node.kind === 'agent' || node.kind === 'pipeline'
        ? node.agent
        : `${node.kind === 'review' || (node.kind === 'route' && node.agent !== 'route') ? `${node.agent} · ` : ''}${node.kind}`;
    const when = node.when === undefined ? '' : `<br/>when ${escapeHtml(node.when)}`;
    return `"${escapeHtml(node.id)}<br/><i>${escapeHtml(what)}</i>${when}"`;
  };
  const shape = (node: FlowGraph['nodes'][number]) =>
    node.kind === 'route'
      ? `{${label(node)}}`
      : node.kind === 'parallel' || node.kind === 'foreach'
        ? `[[${label(node)}]]`
        : `[${label(node)}]`;
  const emit = (parent: string | undefined, branch: string | undefined, indent: string) => {
    for (const node of graph.nodes.filter((n) => n.parent === parent && n.branch === branch)) {
      lines.push(`${indent}${id(node.id)}${shape(node)}`);
      if (node.kind !== 'parallel' && node.kind !== 'foreach') continue;
      const branches = [...new Set(graph.nodes.filter((n) => n.parent === node.id).map((n) => n.branch))];
      for (const b of branches) {
        lines.push(`${indent}subgraph ${id(`${node.id}__${b}`)} ["${escapeHtml(`${node.id} · ${b}`)}"]`);
        emit(node.id, b, `${indent}  `);
        lines.push(`${indent}end`);
      }
    }
  };
  emit(undefined, undefined, '  ');
  lines.push('  finish([end])');
  const first = graph.nodes.find((n) => n.parent === undefined);
  if (first) lines.push(`  start --> ${id(first.id)}`);
  for (const edge of graph.edges) {
    const to = edge.to === FLOW_END ? 'finish' : id(edge.to);
    const arrow = edge.when === 'reject' ? '-.->' : '-->';
    lines.push(
      `  ${id(edge.from)} ${arrow}${edge.when === undefined ? '' : `|"${escapeHtml(edge.when)}"|`} ${to}`,
    );
  }
  return `${lines.join('\n')}\n`;
}

/** A Mermaid node id for a step id (`-` is an arrow to Mermaid; `end` a keyword). */
const id = (stepId: string) => `s_${stepId.replaceAll('-', '_')}`;

const escapeHtml = (text: string) =>
  text.replaceAll('&', '&amp;').replaceAll('"', '&quot;').replaceAll('<', '&lt;').replaceAll('>', '&gt;');
