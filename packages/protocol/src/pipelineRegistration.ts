import { z } from 'zod';
import { Name } from './names.ts';

/**
 * A pipeline's flow as a graph, for views that draw it (the dashboard, `troupe graph`): each step a node — with its
 * agent, or its kind for steps without one, and the parallel step and branch it runs in — and each way the work can
 * go an edge: on to the next step, into each branch of a parallel step, to each target of a route, back to the step
 * that reworks it on a reject, and to the end.
 */
export const FlowGraph = z.object({
  nodes: z.array(
    z.object({
      id: z.string(),
      kind: z.string(),
      /** The step's agent; for a step without one, its kind (`parallel`, `route`). */
      agent: z.string(),
      /** The parallel step and branch it runs in, when it does; a foreach step's steps are in its branch `each`. */
      parent: z.string().optional(),
      branch: z.string().optional(),
      /** Its condition, when it only runs sometimes. */
      when: z.string().optional(),
    }),
  ),
  edges: z.array(
    z.object({
      from: z.string(),
      /** A step id, or `end`. */
      to: z.string(),
      /**
       * When it is taken: `approve` and `reject` after a review, a route's case (`= bug`) or `default`, a parallel
       * step's branch (`branch docs`), a foreach step's items (`each of steps.plan.output.parts`), `answered` or `timeout` after a person's step; absent when it always is.
       */
      when: z.string().optional(),
    }),
  ),
});
export type FlowGraph = z.infer<typeof FlowGraph>;

/** What the KV bucket `pipelines` says of a pipeline some coordinator has loaded. */
export const PipelineRegistration = z.object({
  name: Name,
  description: z.string().optional(),
  agents: z.array(Name),
  steps: z.array(z.string()),
  /** The flow as a graph of steps; absent in registrations from before it was added. */
  graph: FlowGraph.optional(),
  /** The agent that summarizes the pipeline's gateway sessions; absent in registrations from before it was added. */
  summarizer: Name.optional(),
  /**
   * The JSON Schema the task's `input` must match, as the pipeline declares it under `input:`; absent when it
   * declares none (any object is taken).
   */
  input: z.record(z.string(), z.unknown()).optional(),
  /** The JSON Schema of the task's output, when the flow's last step has an agent that declares its `output`. */
  output: z.record(z.string(), z.unknown()).optional(),
  host: z.string(),
  registeredAt: z.string(),
  /**
   * The hash of the newest version: what new tasks run on. A coordinator that starts names its own unless the one
   * named was introduced later (see `register`); `troupe versions use` names any stored one.
   */
  version: z
    .string()
    .regex(/^[0-9a-f]{64}$/)
    .optional(),
});
export type PipelineRegistration = z.infer<typeof PipelineRegistration>;
