import { z } from 'zod';
import type { MemoryScope } from '../memory/memoryStore.ts';
import { defineTool, type ToolContext } from './tool.ts';
import { ToolError } from './toolError.ts';

const Key = z
  .string()
  .regex(/^[A-Za-z0-9_-]{1,100}$/, 'letters, digits, "_" and "-", at most 100')
  .describe('What to file it under');
const Scope = z
  .enum(['task', 'agent'])
  .default('task')
  .describe('"task": shared by the agents of this task; "agent": yours, across tasks (if enabled)');

const MAX_VALUE = 64 * 1024;

function memoryOf(ctx: ToolContext, scope: MemoryScope, tool: string) {
  const memory = ctx.memory;
  if (!memory) throw new ToolError('failed', `${tool}: no memory store in this deployment`);
  if (scope === 'agent' && !memory.longTerm) {
    throw new ToolError(
      'denied',
      `${tool}: long-term memory is not enabled for agent ${ctx.agent} (memory: { longTerm: true })`,
    );
  }
  return memory;
}

/** Stores a note under a key, for the other agents of the task (or, long-term, for this agent's later tasks). */
export const rememberTool = defineTool({
  name: 'remember',
  rerunnable: true,
  description:
    'Store a note under a key. Scope "task" shares it with the other agents of this task; scope "agent" keeps it ' +
    'for your later tasks, when long-term memory is enabled.',
  input: z.strictObject({ key: Key, value: z.string().max(MAX_VALUE), scope: Scope }),
  async run({ key, value, scope }, ctx) {
    await memoryOf(ctx, scope, 'remember').put(scope, key, value);
    return `remembered ${key} (${scope}, ${Buffer.byteLength(value)} bytes)`;
  },
});

/** Reads a note by key, or lists the keys when none is given. */
export const recallTool = defineTool({
  name: 'recall',
  rerunnable: true,
  description: 'Read a note stored with remember, by key; without a key, list the keys there are.',
  input: z.strictObject({ key: Key.optional(), scope: Scope }),
  async run({ key, scope }, ctx) {
    const memory = memoryOf(ctx, scope, 'recall');
    if (key === undefined) {
      const keys = await memory.keys(scope);
      return keys.length === 0 ? `nothing remembered (${scope})` : keys.join('\n');
    }
    const value = await memory.get(scope, key);
    if (value === undefined) throw new ToolError('not_found', `nothing remembered under ${key} (${scope})`);
    return value;
  },
});
