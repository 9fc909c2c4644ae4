import { z } from 'zod';
import { defineTool } from './tool.ts';
import { ToolError } from './toolError.ts';

/**
 * Puts a question to a person and returns their answer. The question shows up in `troupe approvals` and as a
 * `human.asked` event; `troupe answer <id> "…"` replies. It waits as long as the agent's approval timeout.
 */
export const askHumanTool = defineTool({
  name: 'ask_human',
  description:
    'Ask a person a question and wait for their answer. Use it when you need a fact, a preference or a ' +
    'decision that only a person can give. Ask one clear question at a time.',
  input: z.strictObject({ question: z.string().min(1).max(10_000).describe('The question, self-contained') }),
  // The person's deadline (the approval timeout) decides, not the executor's default.
  timeoutMs: 7 * 24 * 60 * 60 * 1_000,
  // Run again after a crash, it waits on the question it asked before rather than asking again.
  rerunnable: true,
  async run({ question }, ctx) {
    if (!ctx.human) throw new ToolError('failed', 'ask_human: there is nobody to ask in this deployment');
    return ctx.human.ask(question, ctx.signal, ctx.callId);
  },
});
