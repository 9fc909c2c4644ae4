import {
  AgentCard,
  ListTaskPushNotificationConfigsResponse,
  ListTasksResponse,
  SendMessageRequest,
  SendMessageResponse,
  type StreamResponse,
  Task,
  TaskPushNotificationConfig,
  taskStateFromJSON,
} from '@a2a-js/sdk';
import { RequestMalformedError } from '@a2a-js/sdk/errors';
import type { A2ARequestHandler, ServerCallContext } from '@a2a-js/sdk/server';

/** What one HTTP+JSON request does: answer once (status and JSON body), or stream. */
export type RestCall =
  | {
      kind: 'once';
      run: (h: A2ARequestHandler, c: ServerCallContext) => Promise<{ status: number; body?: unknown }>;
    }
  | { kind: 'stream'; run: (h: A2ARequestHandler, c: ServerCallContext) => AsyncGenerator<StreamResponse> };

/** No operation at this path, or not with this method. */
export class RestRouteMissing extends Error {
  readonly status: 404 | 405;
  constructor(status: 404 | 405, message: string) {
    super(message);
    this.name = 'RestRouteMissing';
    this.status = status;
  }
}

/** The first path segments of the operations; any other first segment is a tenant. */
const OPERATIONS = new Set(['message:send', 'message:stream', 'tasks', 'extendedAgentCard']);

/**
 * The A2A HTTP+JSON binding's routes, read from a request below the binding's URL (`tasks/abc:cancel`), with an
 * optional tenant first (`demo/tasks/abc:cancel`): the operation, its parameters in the SDK's form, and how its
 * answer is written. Written here rather than taken from the SDK, whose v1.0 REST handler is Express middleware.
 */
export function restCall(
  method: string,
  path: string,
  query: Record<string, string | undefined>,
  body: unknown,
): RestCall {
  for (const [name, value] of Object.entries(query)) {
    if (Array.isArray(value)) throw new RequestMalformedError(`${name}: given more than once; give it once`);
  }
  const segments = path
    .split('/')
    .filter((s) => s !== '')
    .map(decodeURIComponent);
  const tenant =
    segments[0] !== undefined && !OPERATIONS.has(segments[0]) ? (segments.shift() as string) : '';
  const [first, second, third, fourth, ...extra] = segments;
  const json = (asked: unknown) => ({ ...(isObject(asked) ? asked : {}), tenant });
  const need = (allowed: string) => {
    if (method !== allowed) throw new RestRouteMissing(405, `${path}: use ${allowed}, not ${method}`);
  };
  if (extra.length > 0 || first === undefined) throw missing(path);
  if (first === 'message:send' && second === undefined) {
    need('POST');
    return once(async (h, c) => {
      const task = await h.sendMessage(decode(SendMessageRequest, json(body)), c);
      const payload =
        'messageId' in task
          ? { $case: 'message' as const, value: task }
          : { $case: 'task' as const, value: task };
      return { status: 200, body: SendMessageResponse.toJSON({ payload }) };
    });
  }
  if (first === 'message:stream' && second === undefined) {
    need('POST');
    return { kind: 'stream', run: (h, c) => h.sendMessageStream(decode(SendMessageRequest, json(body)), c) };
  }
  if (first === 'extendedAgentCard' && second === undefined) {
    need('GET');
    return once(async (h, c) => ({
      status: 200,
      body: AgentCard.toJSON(await h.getAuthenticatedExtendedAgentCard({ tenant }, c)),
    }));
  }
  if (first !== 'tasks') throw missing(path);
  if (second === undefined) {
    need('GET');
    return once(async (h, c) => {
      const includeArtifacts = query.includeArtifacts === 'true';
      const listed = await h.listTasks(
        {
          tenant,
          contextId: query.contextId ?? '',
          status: query.status ? taskStateFromJSON(query.status) : 0,
          pageSize: integer('pageSize', query.pageSize),
          pageToken: query.pageToken ?? '',
          historyLength: integer('historyLength', query.historyLength),
          statusTimestampAfter: query.statusTimestampAfter || undefined,
          includeArtifacts,
        },
        c,
      );
      return { status: 200, body: listBody(listed, includeArtifacts) };
    });
  }
  const action = /^(.+):(cancel|subscribe)$/.exec(second);
  if (action && third === undefined) {
    const id = action[1] as string;
    if (action[2] === 'subscribe') {
      if (method !== 'GET' && method !== 'POST') throw new RestRouteMissing(405, `${path}: use POST or GET`);
      return { kind: 'stream', run: (h, c) => h.resubscribe({ id, tenant }, c) };
    }
    need('POST');
    return once(async (h, c) => ({
      status: 200,
      body: Task.toJSON(
        await h.cancelTask({ id, tenant, metadata: isObject(body) ? metadataOf(body) : undefined }, c),
      ),
    }));
  }
  if (third === undefined) {
    need('GET');
    return once(async (h, c) => ({
      status: 200,
      body: Task.toJSON(
        await h.getTask(
          { id: second, tenant, historyLength: integer('historyLength', query.historyLength) },
          c,
        ),
      ),
    }));
  }
  if (third !== 'pushNotificationConfigs') throw missing(path);
  const taskId = second;
  if (fourth === undefined) {
    if (method === 'POST') {
      return once(async (h, c) => ({
        status: 201,
        body: TaskPushNotificationConfig.toJSON(
          await h.createTaskPushNotificationConfig(
            decode(TaskPushNotificationConfig, { ...json(body), taskId }),
            c,
          ),
        ),
      }));
    }
    need('GET');
    return once(async (h, c) => ({
      status: 200,
      body: ListTaskPushNotificationConfigsResponse.toJSON(
        await h.listTaskPushNotificationConfigs(
          {
            tenant,
            taskId,
            pageSize: integer('pageSize', query.pageSize) ?? 0,
            pageToken: query.pageToken ?? '',
          },
          c,
        ),
      ),
    }));
  }
  if (method === 'DELETE') {
    return once(async (h, c) => {
      await h.deleteTaskPushNotificationConfig({ tenant, taskId, id: fourth }, c);
      return { status: 204 };
    });
  }
  need('GET');
  return once(async (h, c) => ({
    status: 200,
    body: TaskPushNotificationConfig.toJSON(
      await h.getTaskPushNotificationConfig({ tenant, taskId, id: fourth }, c),
    ),
  }));
}

/**
 * ListTasks' answer as JSON, its page fields always present (the SDK's JSON leaves out empty and zero values), and
 * each task's artifacts too when asked for, if none (`[]`), as the JSON-RPC binding gives them.
 */
export function listBody(listed: ListTasksResponse, includeArtifacts = false): Record<string, unknown> {
  const json = ListTasksResponse.toJSON(listed) as Record<string, unknown>;
  const tasks = (json.tasks ?? []) as Record<string, unknown>[];
  return {
    ...json,
    tasks: includeArtifacts ? tasks.map((t) => ({ ...t, artifacts: t.artifacts ?? [] })) : tasks,
    nextPageToken: listed.nextPageToken,
    pageSize: listed.pageSize,
    totalSize: listed.totalSize,
  };
}

/**
 * A request's JSON in the SDK's form. What the SDK's reader cannot take (a `null` among a message's parts) is the
 * client's to fix, so it is InvalidParams, never an internal error.
 */
export function decode<T>(type: { fromJSON(object: unknown): T }, value: unknown): T {
  try {
    return type.fromJSON(value);
  } catch (error) {
    throw new RequestMalformedError(
      `the request is not one A2A v1.0 takes (a null where an object belongs?): ${(error as Error).message}`,
    );
  }
}

const once = (run: Extract<RestCall, { kind: 'once' }>['run']): RestCall => ({ kind: 'once', run });

const missing = (path: string) => new RestRouteMissing(404, `no A2A operation at ${path}`);

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

function metadataOf(body: Record<string, unknown>): Record<string, unknown> | undefined {
  return isObject(body.metadata) ? body.metadata : undefined;
}

/** A query parameter that must be a whole number, when given. */
function integer(name: string, value: string | undefined): number | undefined {
  if (value === undefined || value === '') return undefined;
  if (!/^-?\d+$/.test(value.trim()))
    throw new RequestMalformedError(`${name}: ${value} is not a whole number`);
  return Number.parseInt(value, 10);
}
