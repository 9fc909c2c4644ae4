import { z } from 'zod';

/** One scripted tool call; `arguments` may be an object (sent as JSON) or raw text (to script malformed calls). */
export const ScriptedToolCall = z.strictObject({
  id: z.string().optional(),
  name: z.string().min(1),
  arguments: z.union([z.record(z.string(), z.unknown()), z.string()]).default({}),
});
export type ScriptedToolCall = z.infer<typeof ScriptedToolCall>;

/** One scripted model reply: text, tool calls, or a failure to raise. */
export const ScriptedTurn = z
  .strictObject({
    content: z.string().default(''),
    toolCalls: z.array(ScriptedToolCall).default([]),
    /** Raise a model error instead of replying (to script faults). */
    error: z.string().optional(),
    /** Reported usage; estimated from text length (4 characters a token) when absent. */
    usage: z.strictObject({ inputTokens: z.number().int(), outputTokens: z.number().int() }).optional(),
    /** Wait before replying, to script slow models. */
    delayMs: z.number().int().nonnegative().max(600_000).optional(),
  })
  .refine((turn) => turn.content !== '' || turn.toolCalls.length > 0 || turn.error !== undefined, {
    message: 'a turn needs content, toolCalls or error',
  });
export type ScriptedTurn = z.infer<typeof ScriptedTurn>;

/** A script: for each agent, the replies it gives in order over one task. */
export const Script = z.strictObject({
  agents: z.record(z.string(), z.array(ScriptedTurn).min(1)),
});
export type Script = z.infer<typeof Script>;
