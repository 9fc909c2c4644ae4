import type { CallToolResult } from '@modelcontextprotocol/server';
import type { TaskView } from '@troupe/protocol';

/** Where a task's trace and output are read as MCP resources. */
export const taskUri = (taskId: string, what: 'trace' | 'output') => `troupe://tasks/${taskId}/${what}`;

/**
 * A task that has ended, as a tool's result: its output as text, parsed into `structuredContent` when the tool
 * declares an output schema (the SDK checks it against the schema), with a link to its trace. A failed or
 * cancelled task is an error result saying why.
 */
export function toolResultOf(view: TaskView, structured: boolean): CallToolResult {
  const meta = { _meta: { 'troupe/taskId': view.taskId } };
  const links: CallToolResult['content'] = [
    {
      type: 'resource_link',
      uri: taskUri(view.taskId, 'trace'),
      name: `trace of ${view.taskId}`,
      mimeType: 'application/json',
    },
  ];
  if (view.status === 'completed') {
    const text = typeof view.output === 'string' ? view.output : JSON.stringify(view.output ?? '');
    const content: CallToolResult['content'] = [{ type: 'text', text }, ...links];
    if (!structured) return { content, ...meta };
    const parsed = parseObject(text);
    if (!parsed) {
      return {
        content: [
          {
            type: 'text',
            text: `task ${view.taskId} completed, but its output is not the JSON object its pipeline declares:\n${text}`,
          },
          ...links,
        ],
        isError: true,
        ...meta,
      };
    }
    return { content, structuredContent: parsed, ...meta };
  }
  const why =
    view.status === 'failed'
      ? `task ${view.taskId} failed (${view.failure?.reason ?? 'unknown'}): ${view.failure?.message ?? 'no reason recorded'}`
      : `task ${view.taskId} was ${view.status}`;
  return { content: [{ type: 'text', text: why }, ...links], isError: true, ...meta };
}

function parseObject(text: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(text);
    return value !== null && typeof value === 'object' && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}
