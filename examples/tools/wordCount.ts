// A tool of one's own, loaded by the stock `troupe up` and `troupe worker` because wordcount.yaml names this file
// under tools.modules. It imports @troupe/runtime and zod as any project of yours would, from node_modules.
import { readFile } from 'node:fs/promises';
import { defineTool, resolveInWorkspace, ToolError } from '@troupe/runtime';
import { z } from 'zod';

/** Counts the words and lines of a text file in the task's workspace. */
export default defineTool({
  name: 'word_count',
  description: 'Count the words and lines of a text file in the workspace',
  input: z.object({ path: z.string().min(1).describe('File path relative to the workspace') }),
  timeoutMs: 5_000,
  rerunnable: true, // it only reads
  async run({ path }, ctx) {
    // Confined as the built-in file tools are: path_outside_workspace and not_found reach the model as such.
    const file = await resolveInWorkspace(ctx.workspace, path, { tool: 'word_count', mustExist: true });
    const text = await readFile(file, { encoding: 'utf8', signal: ctx.signal });
    if (text.trim() === '')
      throw new ToolError('invalid_arguments', `word_count: ${path} is empty; write it first`);
    const words = text.split(/\s+/).filter(Boolean).length;
    const lines = text.split('\n').filter((line) => line.trim() !== '').length;
    return `${path}: ${words} words on ${lines} lines`;
  },
});
