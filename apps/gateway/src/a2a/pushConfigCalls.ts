import type {
  DeleteTaskPushNotificationConfigRequest,
  GetTaskPushNotificationConfigRequest,
  ListTaskPushNotificationConfigsRequest,
  ListTaskPushNotificationConfigsResponse,
  TaskPushNotificationConfig,
} from '@a2a-js/sdk';
import {
  PushNotificationNotSupportedError,
  RequestMalformedError,
  TaskNotFoundError,
} from '@a2a-js/sdk/errors';
import { OperationError } from '@troupe/client';
import { authorize } from '../auth.ts';
import type { A2aCaller, A2aServices } from './pipelineAgent.ts';
import type { PushConfigs } from './pushConfigs.ts';
import { PushError } from './pushError.ts';
import type { TaskLookup } from './taskLookup.ts';

/**
 * A2A's push-config methods for one caller: a token that may read a task may read its configs (their secrets
 * withheld); one that may submit to its pipeline may make and delete them.
 */
export class PushConfigCalls {
  readonly #services: A2aServices;
  readonly #caller: A2aCaller;
  readonly #lookup: TaskLookup;

  constructor(services: A2aServices, caller: A2aCaller, lookup: TaskLookup) {
    this.#services = services;
    this.#caller = caller;
    this.#lookup = lookup;
  }

  async create(params: TaskPushNotificationConfig): Promise<TaskPushNotificationConfig> {
    const task = await this.#lookup.pushTarget(params.taskId, params.tenant);
    authorize(this.#caller.who, 'submit', task.pipeline);
    const configs = await openPushConfigs(this.#services);
    return pushCall(() => configs.create(task, params, this.#caller.who.name));
  }

  async get(params: GetTaskPushNotificationConfigRequest): Promise<TaskPushNotificationConfig> {
    const task = await this.#lookup.pushTarget(params.taskId, params.tenant);
    const entry = await pushCall(async () =>
      (await openPushConfigs(this.#services)).get(task.taskId, params.id),
    );
    if (!entry || entry.pipeline !== task.pipeline) {
      throw new TaskNotFoundError(`task ${params.taskId} has no push notification config ${params.id}`);
    }
    return withoutSecrets(entry.config);
  }

  async list(
    params: ListTaskPushNotificationConfigsRequest,
  ): Promise<ListTaskPushNotificationConfigsResponse> {
    const task = await this.#lookup.pushTarget(params.taskId, params.tenant);
    const entries = await pushCall(async () => (await openPushConfigs(this.#services)).list(task.taskId));
    // A task has at most a few configs: they come in one page.
    return {
      configs: entries.filter((e) => e.pipeline === task.pipeline).map((e) => withoutSecrets(e.config)),
      nextPageToken: '',
    };
  }

  async delete(params: DeleteTaskPushNotificationConfigRequest): Promise<void> {
    const task = await this.#lookup.pushTarget(params.taskId, params.tenant);
    authorize(this.#caller.who, 'submit', task.pipeline);
    await pushCall(async () => (await openPushConfigs(this.#services)).delete(task.taskId, params.id));
  }
}

/** The gateway's push configs; PushNotificationNotSupported when it offers none. */
export async function openPushConfigs(services: A2aServices): Promise<PushConfigs> {
  const open = services.pushConfigs;
  if (!open) throw new PushNotificationNotSupportedError('this gateway does not send push notifications');
  return pushCall(open);
}

/** Runs a push-config operation; what the caller must fix is an invalid request. */
export async function pushCall<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    if (PushError.is(error, 'invalid_config') || PushError.is(error, 'url_refused')) {
      throw new RequestMalformedError({ message: error.message, cause: error });
    }
    if (PushError.is(error, 'unavailable')) {
      throw new OperationError('unavailable', error.message, { cause: error });
    }
    throw error;
  }
}

/**
 * A push config as Get and List show it: its webhook's token and credentials withheld. They are kept only to send
 * with each webhook; any token that may read the task may read its configs, and must not learn another's secrets.
 */
function withoutSecrets(config: TaskPushNotificationConfig): TaskPushNotificationConfig {
  return {
    ...config,
    token: '',
    ...(config.authentication ? { authentication: { ...config.authentication, credentials: '' } } : {}),
  };
}
