import { z } from 'zod';
import type { PipelineConfig } from './pipelineSchema.ts';

/**
 * A pipeline's flow as a graph, for views that draw it (the dashboard): each step a node with its agent, each way
 * the work can go an edge — on to the next step, back to the step that reworks it on a reject, and to the end.
 */
export const FlowGraph = z.object({
  nodes: z.array(z.object({ id: z.string(), kind: z.string(), agent: z.string() })),
  edges: z.array(
    z.object({
      from: z.string(),
      /** A step id, or `end`. */
      to: z.string(),
      /** When it is taken: `approve` and `reject` after a review; absent when it always is. */
      when: z.string().optional(),
    }),
  ),
});
export type FlowGraph = z.infer<typeof FlowGraph>;

/** The end of every flow, as an edge's `to`. */
export const FLOW_END = 'end';

export function flowGraph(config: Pick<PipelineConfig, 'flow'>): FlowGraph {
  const nodes = config.flow.map((step) => ({ id: step.id, kind: step.kind, agent: step.agent }));
  const edges: FlowGraph['edges'] = [];
  config.flow.forEach((step, i) => {
    const next = config.flow[i + 1]?.id ?? FLOW_END;
    if (step.kind === 'review') {
      edges.push({ from: step.id, to: next, when: 'approve' });
      edges.push({ from: step.id, to: step.onReject, when: 'reject' });
    } else edges.push({ from: step.id, to: next });
  });
  return { nodes, edges };
}
