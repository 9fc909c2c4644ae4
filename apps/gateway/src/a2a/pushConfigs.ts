import { randomUUID } from 'node:crypto';
import { TaskPushNotificationConfig } from '@a2a-js/sdk';
import { BUCKETS, type PushDeliveryState, StoredPushConfig, TaskId } from '@troupe/protocol';
import { type JetStreamBus, type KeyValue, KvStore, TransportError } from '@troupe/runtime';
import { PushError } from './pushError.ts';
import { enqueuePushJob } from './pushJobs.ts';
import { checkPushUrl, type PushUrlPolicy } from './pushUrls.ts';

/** A push config's id: a safe KV key token and NATS subject token (a UUID is one). */
export const PUSH_CONFIG_ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;

/** The most push configs one task may have: each one is a webhook every state change of the task is sent to. */
export const MAX_CONFIGS_PER_TASK = 10;

/** The longest `token` or authentication `credentials` kept: they travel in a header. */
const MAX_SECRET_LENGTH = 4_096;

/** An HTTP authentication scheme is a token (RFC 9110): `Bearer`, `Basic`… */
const SCHEME_PATTERN = /^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$/;

/** A stored config as the A2A handler uses it: the SDK's (ts-proto) form, with whose task it is. */
export interface PushConfigEntry {
  config: TaskPushNotificationConfig;
  pipeline: string;
  createdBy: string;
  createdAt: string;
  delivery: PushDeliveryState;
}

export interface PushConfigsOptions {
  /** Where webhooks may go (see {@link PushUrlPolicy}): private addresses are refused unless allowed. */
  urlPolicy?: PushUrlPolicy;
  /** Makes a config's id when the caller gave none. */
  newId?: () => string;
  /** Now, as an ISO time. */
  now?: () => string;
}

/** The KV key of a config. */
export const pushConfigKey = (taskId: string, configId: string): string => `${taskId}.${configId}`;

/**
 * The A2A push-notification configs of tasks, kept in the KV bucket `a2a-push` so every gateway sees them and they
 * outlive any one: what the Create/Get/List/Delete methods of the A2A server read and write. Creating a config
 * also queues its deliveries (see `PushDeliveryState` in pushDelivery.ts): every A2A state change of the task, from its
 * first, goes to the config's URL, at least once and in order.
 *
 * The caller checks who may touch the task (its pipeline, from the task's own record) before calling; the stored
 * pipeline lets it check again on a config alone. A2A task ids are Troupe task ids.
 *
 * @example
 * const configs = await PushConfigs.open(bus, { urlPolicy: { allowHosts: ['hooks.example.com'] } });
 * const made = await configs.create({ taskId, pipeline: 'demo' }, TaskPushNotificationConfig.fromJSON(body), 'alice');
 * const all = await configs.list(taskId); // [{ config, pipeline, createdBy, delivery }]
 */
export class PushConfigs {
  readonly #bus: JetStreamBus;
  readonly #store: KeyValue<StoredPushConfig>;
  readonly #policy: PushUrlPolicy;
  readonly #newId: () => string;
  readonly #now: () => string;

  constructor(bus: JetStreamBus, store: KeyValue<StoredPushConfig>, options: PushConfigsOptions = {}) {
    this.#bus = bus;
    this.#store = store;
    this.#policy = options.urlPolicy ?? {};
    this.#newId = options.newId ?? randomUUID;
    this.#now = options.now ?? (() => new Date().toISOString());
  }

  /** Opens the bucket; `unavailable` when no coordinator (of a version that has it) has made it on this server. */
  static async open(bus: JetStreamBus, options: PushConfigsOptions = {}): Promise<PushConfigs> {
    return new PushConfigs(bus, await openPushBucket(bus), options);
  }

  /** The URL policy configs are held to, for the deliveries too. */
  get urlPolicy(): PushUrlPolicy {
    return this.#policy;
  }

  /**
   * Stores a config for a task and queues its deliveries; returns it with its id (made when empty) and task id.
   * A config with an id the task has already replaces that one's URL and credentials and keeps its place (one that
   * was dropped starts again from where it stopped). Refuses (`invalid_config`, `url_refused`) a config the caller
   * must fix, with why. `task.contextId` is the A2A context every body names (else the one the task was submitted
   * with, from its `a2aContextId` metadata).
   */
  async create(
    task: { taskId: string; pipeline: string; contextId?: string },
    given: TaskPushNotificationConfig,
    createdBy: string,
  ): Promise<TaskPushNotificationConfig> {
    const config = this.#checked(task.taskId, given);
    const key = pushConfigKey(task.taskId, config.id);
    const wire = TaskPushNotificationConfig.toJSON(config) as Record<string, unknown>;
    for (;;) {
      const existing = await this.#store.get(key);
      if (!existing) {
        if ((await this.#store.keys(`${task.taskId}.*`)).length >= MAX_CONFIGS_PER_TASK) {
          await this.#refuseIfFull(task.taskId);
        }
        const record: StoredPushConfig = {
          taskId: task.taskId,
          pipeline: task.pipeline,
          ...(task.contextId ? { contextId: task.contextId } : {}),
          createdBy,
          createdAt: this.#now(),
          config: wire,
          delivery: { state: 'active', cursor: { seq: 0, part: 0 }, delivered: 0, attempts: 0 },
        };
        if ((await this.#store.create(key, record)) === undefined) continue;
        await this.#enqueue(task.taskId, config.id, key);
        return config;
      }
      if (existing.value.pipeline !== task.pipeline) {
        throw new PushError(
          'invalid_config',
          `push config ${config.id} belongs to a task of another pipeline`,
        );
      }
      const restart = existing.value.delivery.state === 'dropped';
      const delivery: PushDeliveryState = restart
        ? { ...existing.value.delivery, state: 'active', attempts: 0 }
        : existing.value.delivery;
      if (restart) {
        delete delivery.failingSince;
        delete delivery.endedAt;
      }
      const replaced = { ...existing.value, config: wire, delivery };
      if ((await this.#store.update(key, replaced, existing.revision)) === undefined) continue;
      if (restart) await this.#enqueue(task.taskId, config.id);
      return config;
    }
  }

  /** A task's config, or undefined when it has none of that id. */
  async get(taskId: string, configId: string): Promise<PushConfigEntry | undefined> {
    if (!TaskId.safeParse(taskId).success || !PUSH_CONFIG_ID_PATTERN.test(configId)) return undefined;
    const entry = await this.#store.get(pushConfigKey(taskId, configId));
    return entry && entryOf(entry.value);
  }

  /** Every config of a task, oldest first. */
  async list(taskId: string): Promise<PushConfigEntry[]> {
    if (!TaskId.safeParse(taskId).success) return [];
    const keys = await this.#store.keys(`${taskId}.*`);
    const entries = await Promise.all(keys.map((key) => this.#store.get(key)));
    return entries
      .flatMap((entry) => (entry ? [entryOf(entry.value)] : []))
      .sort((a, b) => a.createdAt.localeCompare(b.createdAt));
  }

  /**
   * Deletes a config: nothing more is sent to its URL (a body already on its way may still arrive). Deleting one
   * that is not there does nothing; returns whether it was there.
   */
  async delete(taskId: string, configId: string): Promise<boolean> {
    if (!TaskId.safeParse(taskId).success || !PUSH_CONFIG_ID_PATTERN.test(configId)) return false;
    const key = pushConfigKey(taskId, configId);
    if (!(await this.#store.get(key))) return false;
    await this.#store.delete(key);
    return true;
  }

  /**
   * Refuses, as {@link create} would, a config that could not be stored whatever its task: for a config sent with
   * the message that starts a task, checked before the task starts.
   */
  check(given: TaskPushNotificationConfig): void {
    this.#checkedFields(given.id || this.#newId(), given);
  }

  /** The config as it will be stored, or why not. */
  #checked(taskId: string, given: TaskPushNotificationConfig): TaskPushNotificationConfig {
    if (!TaskId.safeParse(taskId).success) {
      throw new PushError('invalid_config', `task id ${JSON.stringify(taskId)} is not a Troupe task id`);
    }
    if (given.taskId && given.taskId !== taskId) {
      throw new PushError(
        'invalid_config',
        `the push config names task ${given.taskId}, but it is being set on task ${taskId}`,
      );
    }
    const id = given.id || this.#newId();
    this.#checkedFields(id, given);
    return { ...given, id, taskId };
  }

  #checkedFields(id: string, given: TaskPushNotificationConfig): void {
    if (!PUSH_CONFIG_ID_PATTERN.test(id)) {
      throw new PushError(
        'invalid_config',
        `push config id ${JSON.stringify(id)} refused: use 1-64 letters, digits, "_" and "-" (or none, to get one)`,
      );
    }
    checkPushUrl(given.url, this.#policy);
    checkSecret('token', given.token);
    if (given.authentication) {
      if (!SCHEME_PATTERN.test(given.authentication.scheme)) {
        throw new PushError(
          'invalid_config',
          `authentication scheme ${JSON.stringify(given.authentication.scheme)} is not an HTTP scheme name such as Bearer`,
        );
      }
      checkSecret('authentication credentials', given.authentication.credentials);
    }
  }

  async #refuseIfFull(taskId: string): Promise<void> {
    // Keys of deleted configs are listed until the bucket is compacted: count those that are there.
    const live = await this.list(taskId);
    if (live.length >= MAX_CONFIGS_PER_TASK) {
      throw new PushError(
        'invalid_config',
        `task ${taskId} has ${live.length} push configs, the most it may have; delete one first`,
      );
    }
  }

  /** Queues a new config's deliveries; a config that cannot be queued is not kept, so none is stored unsent. */
  async #enqueue(taskId: string, configId: string, madeKey?: string): Promise<void> {
    try {
      await enqueuePushJob(this.#bus, taskId, configId);
    } catch (error) {
      if (madeKey) await this.#store.delete(madeKey).catch(() => undefined);
      throw error;
    }
  }
}

/** The bucket of push configs, as a typed store; `unavailable` with what to do when it is missing. */
export async function openPushBucket(bus: JetStreamBus): Promise<KvStore<typeof StoredPushConfig>> {
  try {
    return await KvStore.open(bus, BUCKETS.a2aPush, StoredPushConfig);
  } catch (cause) {
    if (TransportError.is(cause, 'bucket_missing')) {
      throw new PushError(
        'unavailable',
        `the KV bucket ${BUCKETS.a2aPush} does not exist: start a Troupe coordinator of this version once, which makes it`,
        { cause },
      );
    }
    throw new PushError(
      'unavailable',
      `cannot open the KV bucket ${BUCKETS.a2aPush}: ${(cause as Error).message}`,
      {
        cause,
      },
    );
  }
}

function entryOf(stored: StoredPushConfig): PushConfigEntry {
  return {
    config: TaskPushNotificationConfig.fromJSON(stored.config),
    pipeline: stored.pipeline,
    createdBy: stored.createdBy,
    createdAt: stored.createdAt,
    delivery: stored.delivery,
  };
}

function checkSecret(what: string, value: string): void {
  if (value.length > MAX_SECRET_LENGTH) {
    throw new PushError(
      'invalid_config',
      `the push config's ${what} is longer than ${MAX_SECRET_LENGTH} characters`,
    );
  }
  // It goes into a header: a line break would end it there and start another.
  if (/[\r\n\0]/.test(value)) {
    throw new PushError(
      'invalid_config',
      `the push config's ${what} holds a line break or NUL, which a header cannot`,
    );
  }
}
