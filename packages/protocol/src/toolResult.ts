import { z } from 'zod';
import { ValueRef } from './valueRef.ts';

/** How a tool call was judged: run it, refuse it, or ask a person first. */
export const ToolDecision = z.enum(['allow', 'deny', 'ask']);
export type ToolDecision = z.infer<typeof ToolDecision>;

/**
 * The result of one tool call: what the model is told, what the step journal keeps (so a step run again does not run
 * the call twice) and what `tool.result` reports. One type for the agent, the tool executor and the journal.
 */
export const ToolResult = z.object({
  callId: z.string(),
  tool: z.string(),
  ok: z.boolean(),
  output: z.string(),
  error: z.object({ code: z.string(), message: z.string() }).optional(),
  /** The policy's word (or a person's); a call refused before the policy could judge it counts as `deny`. */
  decision: ToolDecision,
  durationMs: z.number(),
  /** The output was cut to fit; how long it was. */
  truncated: z.object({ originalBytes: z.number() }).optional(),
  /** Where the whole output is kept when `output` is cut (the model and the events see the cut one). */
  outputRef: ValueRef.optional(),
  /** The call had run before (an earlier run of the step); this is its recorded result. */
  journaled: z.boolean().optional(),
});
export type ToolResult = z.infer<typeof ToolResult>;
