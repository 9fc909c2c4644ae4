import { type McpServer, ResourceNotFoundError, ResourceTemplate } from '@modelcontextprotocol/server';
import { OperationError } from '@troupe/client';
import type { GatewayActions } from '../actions.ts';
import { AuthRefusal, type Principal } from '../auth.ts';
import { taskUri } from './taskResult.ts';

/** How many of the newest tasks a resource listing names. */
const LISTED_TASKS = 20;

/**
 * Each task's trace (`troupe://tasks/{taskId}/trace`, JSON as `troupe trace --json`) and output
 * (`troupe://tasks/{taskId}/output`, once it has completed) as resources, for the tasks of pipelines the principal
 * may read; another's task reads as one that does not exist.
 */
export function registerTaskResources(server: McpServer, actions: GatewayActions, who: Principal): void {
  const newest = (what: 'trace' | 'output') => async () => {
    const { tasks } = await actions.list(who, { limit: LISTED_TASKS });
    return {
      resources: tasks.map((t) => ({
        uri: taskUri(t.taskId, what),
        name: `${what} of ${t.taskId}`,
        description: `${t.pipeline}: ${t.goal.slice(0, 120)} (${t.status})`,
        mimeType: what === 'trace' ? 'application/json' : 'text/plain',
      })),
    };
  };
  server.registerResource(
    'task-trace',
    new ResourceTemplate('troupe://tasks/{taskId}/trace', { list: newest('trace') }),
    {
      title: 'Task trace',
      description:
        'A task as a tree: steps, model calls, tool calls, approvals, with totals (as troupe trace --json)',
      mimeType: 'application/json',
    },
    async (uri, { taskId }) => {
      const trace = await found(uri.href, () => actions.trace(who, String(taskId)));
      return { contents: [{ uri: uri.href, mimeType: 'application/json', text: JSON.stringify(trace) }] };
    },
  );
  server.registerResource(
    'task-output',
    new ResourceTemplate('troupe://tasks/{taskId}/output', { list: newest('output') }),
    { title: 'Task output', description: "A completed task's output, whole", mimeType: 'text/plain' },
    async (uri, { taskId }) => {
      const view = await found(uri.href, () => actions.task(who, String(taskId)));
      if (view.status !== 'completed')
        throw new ResourceNotFoundError(
          uri.href,
          `task ${view.taskId} has no output yet: it is ${view.status}`,
        );
      const text = typeof view.output === 'string' ? view.output : JSON.stringify(view.output ?? '');
      return { contents: [{ uri: uri.href, mimeType: 'text/plain', text }] };
    },
  );
}

/** A task the principal may not see, or that does not exist, is a resource that is not there. */
async function found<T>(uri: string, read: () => Promise<T>): Promise<T> {
  try {
    return await read();
  } catch (error) {
    if (OperationError.is(error, 'not_found') || error instanceof AuthRefusal)
      throw new ResourceNotFoundError(uri, (error as Error).message);
    throw error;
  }
}
