import { randomUUID } from 'node:crypto';
import type { WorkflowRecord } from '@troupe/protocol';
import {
  BUCKETS,
  ControlMessage,
  ControlReceipt,
  ControlRefusal,
  checkTaskInput,
  checkTaskToSubmit,
  errorMessage,
  formatIssues,
  type InputCut,
  isTaskId,
  originRef,
  PipelineVersion,
  QUEUED_MARK_HEADER,
  subjects,
  type TaskLimits,
  type TaskSubmission,
  type TroupeEvent,
} from '@troupe/protocol';
import {
  isPermissionRefusal,
  type JetStreamBus,
  KvStore,
  logMessage,
  publishToStream,
  readEventHistory,
  TransportError,
  ValueStore,
} from '@troupe/runtime/bus';
import { OperationError, type OperationErrorCode } from './operationError.ts';
import { PipelineRegistry } from './pipelineRegistry.ts';
import type { QueuedStore } from './queuedTasks.ts';
import { CLIENT_WAIT, openWorkflowStore } from './troupeState.ts';

export interface Submitted {
  taskId: string;
  /** The id was submitted before: the task is not run again. */
  duplicate: boolean;
  /** The task's record when it has one already (a duplicate that has started, or ended). */
  record?: WorkflowRecord;
}

export interface SubmitOptions {
  /** Where an input too large for the task message is stored; one on the same connection when absent. */
  values?: ValueStore;
  /** The coordinators' limits; the defaults when absent. */
  limits?: TaskLimits;
  /** Keys of the task's input that hold previews of another task's stored input (a sub-task's), read whole first. */
  inputCut?: InputCut;
  /**
   * Marks the task queued here before it is published (the gateway does), so it can be read and cancelled before a
   * coordinator claims it; `now` stamps the mark.
   */
  queued?: { store: QueuedStore; now: () => string };
  /**
   * The version the task will run on (a restart's or fork's, its origin's): its input schema is checked, not the
   * newest's. One that cannot be read here is left to the coordinator, which checks it as the task starts.
   */
  version?: string;
}

/**
 * Stores a task in the `TASKS` stream for a pipeline a coordinator has loaded. A known id is never run again,
 * whenever it was first submitted: the answer says it was a duplicate, with the task's record when there is one.
 * A task the coordinators would refuse is refused here (`too_large` or `invalid_request`), before anything is stored; one whose input alone
 * makes it too large has its input stored in the pipeline's inputs bucket first, and carries an `inputRef` to it.
 */
export async function submitToPipeline(
  bus: JetStreamBus,
  pipeline: string,
  task: TaskSubmission & { id: string },
  options: SubmitOptions = {},
): Promise<Submitted> {
  const values = options.values ?? new ValueStore(bus);
  const failed = (what: string) => (error: unknown) => {
    throw new OperationError('unavailable', `cannot ${what} of task ${task.id}: ${errorMessage(error)}`, {
      cause: error,
    });
  };
  // Checked first, whole: a task the coordinators would refuse is refused before anything is looked up or stored.
  const whole = options.inputCut
    ? await values
        .wholeInput(task.input, options.inputCut)
        .then((input) => ({ ...task, input }))
        .catch(failed('read the stored input'))
    : task;
  const checked = checkTaskToSubmit(whole, options.limits);
  if (!checked.ok) {
    const reason = checked.reason.replace(/^payload/, 'the task');
    throw new OperationError(checked.limit === 'maxBytes' ? 'too_large' : 'invalid_request', reason);
  }
  let registry: PipelineRegistry;
  try {
    registry = await PipelineRegistry.open(bus, CLIENT_WAIT);
  } catch (error) {
    if (!TransportError.is(error, 'bucket_missing')) {
      throw new OperationError('unavailable', `cannot read the pipelines: ${errorMessage(error)}`, {
        cause: error,
      });
    }
    throw new OperationError(
      'no_coordinator',
      `no Troupe coordinator has run on ${bus.server} yet (${(error as Error).message})`,
      { cause: error },
    );
  }
  const known = await registry.names();
  if (!known.includes(pipeline)) {
    throw new OperationError(
      'not_found',
      `no coordinator has loaded a pipeline named "${pipeline}"; loaded: ${known.join(', ') || 'none'}`,
    );
  }
  const store = await openWorkflowStore(bus);
  const existing = (await store.get(task.id))?.value;
  if (existing) return { taskId: task.id, duplicate: true, record: existing };
  // The schema of the version the task runs on (a new task's, the newest); the coordinator checks it again as it starts.
  const schema =
    options.version === undefined
      ? (await registry.get(pipeline))?.input
      : await versionInput(bus, pipeline, options.version);
  const fits = schema === undefined ? { ok: true as const } : checkTaskInput(schema, whole.input);
  if (!fits.ok) throw new OperationError('invalid_request', fits.reason);
  const ready = await withStoredInput(values, pipeline, whole, checked.storeInput).catch(
    failed('store the input'),
  );
  const marked = options.queued ? await markQueued(bus, options.queued, pipeline, ready) : false;
  let duplicate: boolean;
  try {
    // Said on the message whenever the task may have a mark: this one, one an earlier try left before it could
    // publish, or one whose write failed only as far as this client can tell (a lost reply). A coordinator reads the
    // marks of only such messages.
    ({ duplicate } = await submitTask(bus, pipeline, ready, { queuedMark: options.queued !== undefined }));
  } catch (error) {
    // Nothing was stored: a mark left would show a task that does not exist.
    if (marked) await options.queued?.store.delete(task.id).catch(() => undefined);
    // The server refused this client's user the pipeline's subject (an observer, a submitter of other pipelines).
    // Said plainly: nats.js says only "Permissions Violation".
    if (isPermissionRefusal(error)) {
      throw new OperationError(
        'unavailable',
        `this NATS user may not submit tasks to pipeline ${pipeline} (${errorMessage(error)}); ` +
          `a submitter of pipeline ${pipeline} may (docs/permissions.md)`,
        { cause: error },
      );
    }
    throw error;
  }
  if (!duplicate) return { taskId: task.id, duplicate };
  // TASKS already held a message with this id that had no mark: not this submission's, maybe not this pipeline's.
  if (marked) await options.queued?.store.delete(task.id).catch(() => undefined);
  const record = (await store.get(task.id))?.value;
  return { taskId: task.id, duplicate, ...(record ? { record } : {}) };
}

/** The input schema of one stored version of a pipeline (KV `versions`); undefined when it has none or is not read. */
async function versionInput(
  bus: JetStreamBus,
  pipeline: string,
  hash: string,
): Promise<Record<string, unknown> | undefined> {
  const versions = await KvStore.open(bus, BUCKETS.versions, PipelineVersion, CLIENT_WAIT).catch(
    () => undefined,
  );
  const config = (await versions?.get(`${pipeline}.${hash}`).catch(() => undefined))?.value.config;
  const input = config?.input;
  return typeof input === 'object' && input !== null && !Array.isArray(input)
    ? (input as Record<string, unknown>)
    : undefined;
}

/**
 * Marks a task queued; false when it was marked already (the same id was submitted before), or when the mark cannot
 * be written: the task is still submitted, and is unknown to readers until a coordinator claims it, as an unmarked one.
 */
async function markQueued(
  { logger }: Pick<JetStreamBus, 'logger'>,
  queued: NonNullable<SubmitOptions['queued']>,
  pipeline: string,
  task: TaskSubmission & { id: string },
): Promise<boolean> {
  const mark = {
    taskId: task.id,
    pipeline,
    goal: task.goal,
    ...(task.metadata ? { metadata: task.metadata } : {}),
    submittedAt: queued.now(),
    ...(task.origin ? { origin: originRef(task.origin) } : {}),
  };
  try {
    return (await queued.store.create(task.id, mark)) !== undefined;
  } catch (error) {
    logger.warn({ err: error, taskId: task.id }, 'cannot mark the task queued; submitting it unmarked');
    return false;
  }
}

/** An id no task can have: not a key to look up (the store throws a bare "invalid key"), nor a subject token. */
export function noSuchTaskId(taskId: string): OperationError {
  return new OperationError(
    'not_found',
    `no task ${JSON.stringify(taskId)} can exist: a task id is 1-64 characters of A-Z, a-z, 0-9, "_" and "-"`,
  );
}

/** A task's record in KV `workflows`; throws `not_found` when the server knows no such task. */
export async function readTask(bus: JetStreamBus, taskId: string): Promise<WorkflowRecord> {
  if (!isTaskId(taskId)) throw noSuchTaskId(taskId);
  const record = (await (await openWorkflowStore(bus)).get(taskId))?.value;
  if (!record) throw new OperationError('not_found', `no task ${taskId} is known on this server`);
  return record;
}

/** Asks the coordinator running a task to stop it; its model call in flight is aborted. */
export async function cancelTask(bus: JetStreamBus, taskId: string, reason?: string): Promise<void> {
  const record = await readTask(bus, taskId);
  if (record.status !== 'running') {
    throw new OperationError('conflict', `task ${taskId} already ${record.status}; nothing to cancel`);
  }
  const subject = subjects.control(taskId);
  try {
    await bus.request(subject, { action: 'cancel', ...(reason ? { reason } : {}) }, ControlReceipt, {
      timeoutMs: 10_000,
      meta: { taskId, from: 'user', kind: 'cancel' },
    });
  } catch (error) {
    // A coordinator answers with the task's state when none runs it (unknown_task, task_ended, not_running).
    throw controlFailure(error, record, subject);
  }
}

/**
 * Moves a running task to another version of its pipeline (`to`: a hash or a unique prefix; the newest when absent),
 * through the coordinator running it, which does so only when the task's state fits that version. Answers with the
 * versions it moved from and to; throws `conflict` with the reason when it refused, changing nothing.
 */
export async function migrateTask(
  bus: JetStreamBus,
  taskId: string,
  to?: string,
): Promise<{ from: string; to: string }> {
  const record = await readTask(bus, taskId);
  if (record.status !== 'running') {
    throw new OperationError('conflict', `task ${taskId} already ${record.status}; nothing to migrate`);
  }
  const subject = subjects.control(taskId);
  try {
    const receipt = await bus.request(
      subject,
      { action: 'migrate', ...(to === undefined ? {} : { to }) },
      ControlReceipt,
      { timeoutMs: 30_000, meta: { taskId, from: 'user', kind: 'migrate' } },
    );
    return { from: receipt.from ?? '', to: receipt.to ?? '' };
  } catch (error) {
    throw controlFailure(error, record, subject);
  }
}

/** Who pauses, resumes or tells a task: a person's name, kept in its events and record. */
export interface SteerOptions {
  by?: string;
}

/**
 * Holds a running task: the coordinator running it records the pause before it answers, so the task stays held
 * across a restart; the step at work finishes its current model or tool call, then nothing more runs until
 * {@link resumeTask}. Throws `conflict` for a task ended or held already, `not_found` for an unknown one, and
 * `unavailable` when no coordinator runs it right now.
 */
export async function pauseTask(
  bus: JetStreamBus,
  taskId: string,
  options: SteerOptions & { reason?: string } = {},
): Promise<void> {
  const { reason, by } = options;
  await steer(bus, taskId, 'pause', {
    action: 'pause',
    ...(reason ? { reason } : {}),
    ...(by ? { by } : {}),
  });
}

/** Lets a paused task go on from where it was held; `conflict` when it is not paused, or has ended. */
export async function resumeTask(
  bus: JetStreamBus,
  taskId: string,
  options: SteerOptions = {},
): Promise<void> {
  await steer(bus, taskId, 'resume', { action: 'resume', ...(options.by ? { by: options.by } : {}) });
}

/**
 * Tells a running task something: recorded before the answer, the agent at work reads it before its next model call
 * (the next agent step does, when none is at work), as a user turn. Answers with the message's id, which the task's
 * `task.told` and `agent.told` events name, and the tell's key: `key` when given, else a new uuid. A tell again with
 * the same key is answered with the same id and tells nothing new, so a tell whose answer was lost (the error says
 * its key) is retried safely with it.
 */
export async function tellTask(
  bus: JetStreamBus,
  taskId: string,
  text: string,
  options: SteerOptions & {
    key?: string;
    /** How long to wait for the coordinator's answer (default 10 s). */
    timeoutMs?: number;
    /**
     * What an unanswered tell's error tells its caller to do to ask again safely, when it does not pass `key` itself
     * (a gateway derives it from the client's idempotency key); by default, to tell it again with `key`.
     */
    again?: string;
  } = {},
): Promise<{ messageId: string; key: string }> {
  const key = options.key ?? randomUUID();
  const message = ControlMessage.safeParse({
    action: 'tell',
    text,
    ...(options.by ? { by: options.by } : {}),
    key,
  });
  if (!message.success) {
    const problems = formatIssues(message.error.issues).map((i) => `${i.path || 'message'}: ${i.message}`);
    throw new OperationError('invalid_request', `cannot tell task ${taskId}: ${problems.join('; ')}`);
  }
  const receipt = await steer(
    bus,
    taskId,
    'tell',
    message.data,
    options.again ?? `tell it again with key ${key} and it is told once`,
    options.timeoutMs,
  );
  if (!receipt.messageId) {
    throw new OperationError(
      'unavailable',
      `the coordinator running task ${taskId} took the message but did not say its id; see troupe logs ${taskId}`,
    );
  }
  return { messageId: receipt.messageId, key };
}

/** How long a pause, resume or tell waits for the coordinator's answer. */
const STEER_ANSWER_MS = 10_000;

/** Sends a pause, resume or tell to the coordinator running a task, after the task's record says it may take one. */
async function steer(
  bus: JetStreamBus,
  taskId: string,
  action: 'pause' | 'resume' | 'tell',
  message: ControlMessage,
  /** What to do when the message was heard but not answered: how to ask again safely, if there is a way. */
  again?: string,
  timeoutMs = STEER_ANSWER_MS,
): Promise<ControlReceipt> {
  const record = await readTask(bus, taskId);
  if (record.status !== 'running') {
    throw new OperationError('conflict', `task ${taskId} already ${record.status}; nothing to ${action}`);
  }
  // On the pipeline's steering subject, which NATS permissions can grant per pipeline (the approver role's).
  const subject = subjects.steer(record.pipeline, taskId);
  try {
    return await bus.request(subject, message, ControlReceipt, {
      timeoutMs,
      meta: { taskId, from: 'user', kind: action },
    });
  } catch (error) {
    throw controlFailure(error, record, subject, again);
  }
}

/** What a coordinator's refusal is to a caller: no such task, nothing it can do now, or nobody to ask right now. */
const REFUSAL_CODE: Record<ControlRefusal, OperationErrorCode> = {
  unknown_task: 'not_found',
  task_ended: 'conflict',
  already_paused: 'conflict',
  not_paused: 'conflict',
  // Too many messages no step has read yet: told again once one has.
  told_backlog: 'conflict',
  unknown_version: 'conflict',
  not_migratable: 'conflict',
  // The task has not ended, but its coordinator stopped: it runs again when its message is redelivered.
  not_running: 'unavailable',
};

/** Why a control message to a task's coordinator changed nothing, as an `OperationError` a user can act on. */
function controlFailure(
  error: unknown,
  record: WorkflowRecord,
  subject: string,
  again?: string,
): OperationError {
  // The server refused this client's NATS user the subject: a role that may not (an approver cancelling, or steering
  // another pipeline's tasks). Said plainly: nats.js says only "Permissions Violation".
  if (isPermissionRefusal(error)) {
    return new OperationError(
      'unavailable',
      `this NATS user may not publish on ${subject} (task ${record.taskId} of pipeline ${record.pipeline}): ` +
        `${errorMessage(error)}; docs/permissions.md says which role may`,
      { cause: error },
    );
  }
  const refusal = TransportError.is(error) ? ControlRefusal.safeParse(error.code) : undefined;
  if (refusal?.success) {
    return new OperationError(REFUSAL_CODE[refusal.data], (error as Error).message, { cause: error });
  }
  if (TransportError.is(error, 'no_responders')) {
    return new OperationError(
      'no_coordinator',
      `no coordinator answered for task ${record.taskId} (it is at ${record.state}); none is running on this server`,
      { cause: error },
    );
  }
  // Heard, maybe by a coordinator too busy to answer in time: what was asked may have been recorded all the same.
  if (TransportError.is(error, 'timeout')) {
    return new OperationError(
      'no_coordinator',
      `no coordinator answered for task ${record.taskId} (it is at ${record.state}) in time; what was asked may still ` +
        `have been taken: ${again ?? `look at the task (troupe status ${record.taskId}) before asking again`}`,
      { cause: error },
    );
  }
  return new OperationError('unavailable', (error as Error).message, { cause: error });
}

/**
 * Every event of a task the `EVENTS` stream keeps, in the order it kept them, each once (an event republished
 * beyond the stream's duplicate window is stored twice). Give the task's `pipeline` when it is known: a reader whose
 * NATS user may read only some pipelines' events may not filter on every pipeline's.
 */
export async function readTaskEvents(
  bus: JetStreamBus,
  taskId: string,
  pipeline?: string,
): Promise<TroupeEvent[]> {
  const events: TroupeEvent[] = [];
  const seen = new Set<string>();
  try {
    for await (const stored of readEventHistory(bus, {
      subject: subjects.taskEvents(taskId, pipeline),
      wait: CLIENT_WAIT,
    })) {
      if (stored.type !== 'event' || seen.has(stored.event.id)) continue;
      seen.add(stored.event.id);
      events.push(stored.event);
    }
  } catch (error) {
    if (TransportError.is(error, 'stream_missing')) {
      throw new OperationError(
        'no_coordinator',
        `no Troupe coordinator has run on this server yet (${error.message})`,
        {
          cause: error,
        },
      );
    }
    if (TransportError.is(error)) throw new OperationError('unavailable', error.message, { cause: error });
    throw error;
  }
  return events;
}

/** The outcome of storing a task in the `TASKS` stream. */
export interface SubmitResult {
  streamSequence: number;
  /** True when a task with this id was stored within the stream's duplicate window: nothing new was stored. */
  duplicate: boolean;
}

/**
 * Stores a task on `troupe.tasks.<pipeline>` in the `TASKS` stream, with its id as `Nats-Msg-Id` so a
 * resubmission within the duplicate window is dropped by the server. `queuedMark` says the task may have a mark in KV
 * `queued` (header {@link QUEUED_MARK_HEADER}), which coordinators then read; no other task's is read.
 */
export async function submitTask(
  bus: JetStreamBus,
  pipeline: string,
  task: TaskSubmission & { id: string },
  options: { queuedMark?: boolean } = {},
): Promise<SubmitResult> {
  const subject = subjects.task(pipeline);
  const ack = await publishToStream(bus, subject, JSON.stringify(task), {
    msgId: task.id,
    ...(options.queuedMark ? { headers: { [QUEUED_MARK_HEADER]: '1' } } : {}),
  });
  logMessage(bus.logger, bus.messageLogLevel, 'out', subject, {
    taskId: task.id,
    from: 'user',
    to: pipeline,
    kind: 'task',
  });
  return { streamSequence: ack.seq, duplicate: ack.duplicate };
}

/**
 * The task to publish: as it is, or, when its input was found too large for the message ({@link
 * checkTaskToSubmit}'s `storeInput`), with that input stored in the pipeline's inputs bucket and an `inputRef`
 * to it in its place.
 */
export async function withStoredInput<T extends TaskSubmission & { id: string }>(
  values: Pick<ValueStore, 'storeInput'>,
  pipeline: string,
  task: T,
  storeInput: string | undefined,
): Promise<T> {
  if (storeInput === undefined) return task;
  const { input: _stored, ...rest } = task;
  return { ...rest, inputRef: await values.storeInput(pipeline, task.id, storeInput) } as T;
}
