import {
  type AgentCard,
  type CancelTaskRequest,
  type DeleteTaskPushNotificationConfigRequest,
  type GetExtendedAgentCardRequest,
  type GetTaskPushNotificationConfigRequest,
  type GetTaskRequest,
  type ListTaskPushNotificationConfigsRequest,
  type ListTaskPushNotificationConfigsResponse,
  type ListTasksRequest,
  type ListTasksResponse,
  type SendMessageRequest,
  type StreamResponse,
  type SubscribeToTaskRequest,
  type Task,
  type TaskPushNotificationConfig,
  TaskState,
} from '@a2a-js/sdk';
import { RequestMalformedError, TaskNotCancelableError, UnsupportedOperationError } from '@a2a-js/sdk/errors';
import type { A2ARequestHandler, ServerCallContext } from '@a2a-js/sdk/server';
import { OperationError, openWorkflowStore, readValues } from '@troupe/client';
import type { WorkflowRecord } from '@troupe/protocol';
import type { GatewayActions } from '../actions.ts';
import { authorize, mayTouch, type Principal } from '../auth.ts';
import type { Sessions } from '../sessions.ts';
import type { StreamQuota } from '../streamQuota.ts';
import type { TaskIds } from '../taskIds.ts';
import { type Begun, MessageIntake } from './messageIntake.ts';
import { openPushConfigs, PushConfigCalls, pushCall } from './pushConfigCalls.ts';
import type { PushConfigs } from './pushConfigs.ts';
import { pageOfTasks, pageSizeOf } from './taskList.ts';
import { TaskLookup } from './taskLookup.ts';
import { isTerminal, TaskFold } from './taskMapping.ts';
import type { TaskReader } from './taskReader.ts';

/** What every A2A request is served with: Troupe's own layer over NATS, nothing kept in this process. */
export interface A2aServices {
  actions: GatewayActions;
  sessions: Sessions;
  reader: TaskReader;
  bus: Parameters<typeof openWorkflowStore>[0];
  /** Where push configs are kept; undefined when this gateway does not offer push notifications. */
  pushConfigs: (() => Promise<PushConfigs>) | undefined;
  /** The longest a blocking SendMessage waits for its task to settle, in ms; then it answers with the task as it is. */
  blockingMs: number;
  /** Names the session a conversation's first message opens, from the token and the message's id. */
  ids: TaskIds;
  /** How long CancelTask waits for the task's coordinator to record the cancel, in ms. */
  cancelWaitMs: number;
  /** The gateway's per-token caps: a blocking SendMessage holds a NATS consumer while it waits. */
  quota: StreamQuota;
}

/** Who asks, at which endpoint. */
export interface A2aCaller {
  who: Principal;
  /** The pipeline the endpoint serves; absent at the gateway's own endpoint, where a request's `tenant` names it. */
  pipeline: string | undefined;
  card: AgentCard;
}

/** The state key of a request's AbortSignal in its `ServerCallContext`: set when the client goes. */
export const SIGNAL_KEY = 'troupe.signal';

/** How a stream ends: a SendStreamingMessage when its task settles (ends, or asks for input); a subscription at its end. */
type Until = 'settled' | 'terminal';

/**
 * A pipeline as an A2A agent: the SDK's request-handler interface over Troupe's tasks. The A2A task is the Troupe
 * task (same id); its state is read from the task's events and record on every call, so any gateway answers for any
 * task and a restart loses nothing. A message without a task id starts a task in the message's context (a gateway
 * session, made when new); one with a task id answers what that task asks (an approval or a question).
 */
export class PipelineAgent implements A2ARequestHandler {
  readonly #services: A2aServices;
  readonly #caller: A2aCaller;
  readonly #lookup: TaskLookup;
  readonly #push: PushConfigCalls;
  readonly #intake: MessageIntake;

  constructor(services: A2aServices, caller: A2aCaller) {
    this.#services = services;
    this.#caller = caller;
    this.#lookup = new TaskLookup(services, caller);
    this.#push = new PushConfigCalls(services, caller, this.#lookup);
    this.#intake = new MessageIntake(services, caller, this.#lookup);
  }

  async getAgentCard(): Promise<AgentCard> {
    return this.#caller.card;
  }

  async getAuthenticatedExtendedAgentCard(
    _p: GetExtendedAgentCardRequest,
    _c: ServerCallContext,
  ): Promise<AgentCard> {
    // The card says `extendedAgentCard: false`, for which the spec (§3.3.4) prescribes UnsupportedOperation.
    throw new UnsupportedOperationError(
      'this agent has no extended card (its card says extendedAgentCard: false): the card is served to token holders only already',
    );
  }

  async sendMessage(params: SendMessageRequest, context: ServerCallContext): Promise<Task> {
    const begun = await this.#intake.begin(params);
    if ('rejected' in begun) return begun.rejected;
    await this.#pushConfigOf(params, begun);
    const historyLength = historyLengthOf(params.configuration?.historyLength);
    if (params.configuration?.returnImmediately) return (await this.#current(begun)).task({ historyLength });
    const signal = AbortSignal.any([signalOf(context), AbortSignal.timeout(this.#services.blockingMs)]);
    // The task has started (or been answered) already: with no consumer slot left, it is answered as it stands.
    let release: () => void;
    try {
      release = this.#services.quota.take(this.#caller.who, 'consumers');
    } catch {
      return (await this.#current(begun)).task({ historyLength });
    }
    try {
      const run = this.#run(begun, 'settled', signal);
      let last: IteratorResult<StreamResponse, TaskFold>;
      do last = await run.next();
      while (!last.done);
      return last.value.task({ historyLength });
    } finally {
      release();
    }
  }

  async *sendMessageStream(
    params: SendMessageRequest,
    context: ServerCallContext,
  ): AsyncGenerator<StreamResponse, void, undefined> {
    const begun = await this.#intake.begin(params);
    if ('rejected' in begun) {
      yield { payload: { $case: 'task', value: begun.rejected } };
      return;
    }
    await this.#pushConfigOf(params, begun);
    yield* this.#run(begun, 'settled', signalOf(context));
  }

  async *resubscribe(
    params: SubscribeToTaskRequest,
    context: ServerCallContext,
  ): AsyncGenerator<StreamResponse, void, undefined> {
    const { reader } = this.#services;
    const found = await this.#lookup.recordOrTurn(params.id, params.tenant);
    const snapshot =
      'record' in found ? await reader.snapshot(found.record) : { fold: found.fold, seen: new Set<string>() };
    if ('record' in found && isTerminal(snapshot.fold.state)) {
      throw new UnsupportedOperationError(
        `task ${params.id} has ended (${found.record.status}): there is nothing to subscribe to; GetTask reads it`,
      );
    }
    yield { payload: { $case: 'task', value: snapshot.fold.task() } };
    const task = 'record' in found ? found.record : { taskId: params.id, pipeline: found.pipeline };
    for await (const event of reader.follow(task, signalOf(context), snapshot.seen)) {
      yield* await reader.applyTo(snapshot.fold, event);
      if (isTerminal(snapshot.fold.state)) return;
    }
  }

  async getTask(params: GetTaskRequest, _context: ServerCallContext): Promise<Task> {
    const historyLength = historyLengthOf(params.historyLength);
    let record: WorkflowRecord;
    try {
      record = await this.#lookup.record(params.id, params.tenant);
    } catch (error) {
      const waiting = await this.#lookup.submittedTurn(params.id, params.tenant);
      if (!waiting) throw error;
      return waiting.task({ historyLength });
    }
    return (await this.#services.reader.snapshot(record)).fold.task({ historyLength });
  }

  async listTasks(params: ListTasksRequest, _context: ServerCallContext): Promise<ListTasksResponse> {
    const { who } = this.#caller;
    const pipeline = this.#lookup.pipelineOf(params.tenant);
    authorize(who, 'read', pipeline);
    const historyLength = historyLengthOf(params.historyLength) ?? 0;
    if (!(params.status in STATE_NAMES) || params.status === TaskState.UNRECOGNIZED) {
      throw new RequestMalformedError(
        'status: not a task state (TASK_STATE_SUBMITTED, TASK_STATE_WORKING, …)',
      );
    }
    if (params.statusTimestampAfter !== undefined && Number.isNaN(Date.parse(params.statusTimestampAfter))) {
      throw new RequestMalformedError(
        `statusTimestampAfter: ${params.statusTimestampAfter} is not an ISO time`,
      );
    }
    const pageSize = pageSizeOf(params.pageSize);
    const records = await readValues(await openWorkflowStore(this.#services.bus));
    const { page, nextPageToken, totalSize } = pageOfTasks(records, {
      visible: (p) => mayTouch(who, p) && (pipeline === undefined || p === pipeline),
      pageSize,
      ...(params.contextId ? { contextId: params.contextId } : {}),
      ...(params.status !== TaskState.TASK_STATE_UNSPECIFIED ? { state: params.status } : {}),
      ...(params.statusTimestampAfter ? { after: new Date(params.statusTimestampAfter).toISOString() } : {}),
      ...(params.pageToken ? { pageToken: params.pageToken } : {}),
    });
    const tasks = await Promise.all(
      page.map(async (record) =>
        (await this.#services.reader.snapshot(record)).fold.task({
          historyLength,
          includeArtifacts: params.includeArtifacts ?? false,
        }),
      ),
    );
    return { tasks, nextPageToken, pageSize, totalSize };
  }

  async cancelTask(params: CancelTaskRequest, _context: ServerCallContext): Promise<Task> {
    const record = await this.#lookup.record(params.id, params.tenant);
    if (record.status === 'cancelled') return (await this.#services.reader.snapshot(record)).fold.task();
    if (record.status !== 'running') {
      throw new TaskNotCancelableError(
        `task ${params.id} has already ${record.status}: it cannot be cancelled`,
      );
    }
    try {
      await this.#services.actions.cancel(this.#caller.who, params.id, 'cancelled over A2A');
    } catch (error) {
      // It ended while the cancel was on its way: cancelled by someone else is still cancelled.
      if (!OperationError.is(error, 'conflict')) throw error;
      const now = await this.#lookup.record(params.id, params.tenant);
      if (now.status === 'cancelled') return (await this.#services.reader.snapshot(now)).fold.task();
      throw new TaskNotCancelableError(`task ${params.id} has already ${now.status}: it cannot be cancelled`);
    }
    // The coordinator took the cancel; the task is CANCELED once its event is stored.
    const snapshot = await this.#services.reader.snapshot(record);
    if (!isTerminal(snapshot.fold.state)) {
      for await (const event of this.#services.reader.follow(
        record,
        AbortSignal.timeout(this.#services.cancelWaitMs),
        snapshot.seen,
      )) {
        await this.#services.reader.applyTo(snapshot.fold, event);
        if (isTerminal(snapshot.fold.state)) break;
      }
    }
    return snapshot.fold.task();
  }

  createTaskPushNotificationConfig(
    params: TaskPushNotificationConfig,
    _context: ServerCallContext,
  ): Promise<TaskPushNotificationConfig> {
    return this.#push.create(params);
  }

  getTaskPushNotificationConfig(
    params: GetTaskPushNotificationConfigRequest,
    _context: ServerCallContext,
  ): Promise<TaskPushNotificationConfig> {
    return this.#push.get(params);
  }

  listTaskPushNotificationConfigs(
    params: ListTaskPushNotificationConfigsRequest,
    _context: ServerCallContext,
  ): Promise<ListTaskPushNotificationConfigsResponse> {
    return this.#push.list(params);
  }

  deleteTaskPushNotificationConfig(
    params: DeleteTaskPushNotificationConfigRequest,
    _context: ServerCallContext,
  ): Promise<void> {
    return this.#push.delete(params);
  }

  /**
   * Keeps the push config a SendMessage carries for its task. Checked before the task starts (see {@link #begin}),
   * so what could refuse it now is NATS alone.
   */
  async #pushConfigOf(params: SendMessageRequest, begun: Exclude<Begun, { rejected: Task }>): Promise<void> {
    const given = params.configuration?.taskPushNotificationConfig;
    if (!given) return;
    const configs = await openPushConfigs(this.#services);
    await pushCall(() =>
      configs.create(
        { taskId: begun.ref.taskId, pipeline: begun.pipeline, contextId: begun.ref.contextId },
        { ...given, taskId: begun.ref.taskId },
        this.#caller.who.name,
      ),
    );
  }

  /**
   * The task's updates as they happen, opened by the task as it stands: a new task from its first event, an
   * answered one from its snapshot. Returns the fold, with the task as it stood when the stream ended.
   */
  async *#run(
    begun: Exclude<Begun, { rejected: Task }>,
    until: Until,
    signal: AbortSignal,
  ): AsyncGenerator<StreamResponse, TaskFold, undefined> {
    const { reader } = this.#services;
    const task = { taskId: begun.ref.taskId, pipeline: begun.pipeline };
    const snapshot = begun.record ? await reader.snapshot(begun.record) : undefined;
    const fold = snapshot?.fold ?? this.#submitted(begun);
    const settled = () =>
      isTerminal(fold.state) ||
      (until === 'settled' &&
        fold.state === TaskState.TASK_STATE_INPUT_REQUIRED &&
        !fold.pending.some((p) => p.requestId === begun.answered));
    yield { payload: { $case: 'task', value: fold.task() } };
    if (settled()) return fold;
    for await (const event of reader.follow(task, signal, snapshot?.seen)) {
      yield* await reader.applyTo(fold, event);
      if (settled()) break;
    }
    return fold;
  }

  /** A task just submitted, before any event of it: SUBMITTED, with the message that started it. */
  #submitted(begun: Exclude<Begun, { rejected: Task }>): TaskFold {
    return new TaskFold(begun.ref, new Date().toISOString(), begun.message);
  }

  /** The task as it stands now, for a SendMessage that does not wait. */
  async #current(begun: Exclude<Begun, { rejected: Task }>): Promise<TaskFold> {
    const record = await this.#services.actions
      .readable(this.#caller.who, begun.ref.taskId)
      .catch(() => undefined);
    return record ? (await this.#services.reader.snapshot(record)).fold : this.#submitted(begun);
  }
}

/** Every task state by number: what a ListTasks filter may name. */
const STATE_NAMES: Record<number, string> = Object.fromEntries(
  Object.entries(TaskState)
    .filter(([, v]) => typeof v === 'number' && v >= 0)
    .map(([k, v]) => [v, k]),
);

/** A history length asked for: a whole number from 0, or none (the whole history). */
function historyLengthOf(asked: number | undefined): number | undefined {
  if (asked === undefined) return undefined;
  if (!Number.isInteger(asked) || asked < 0) {
    throw new RequestMalformedError(`historyLength: ${asked} is not a whole number from 0`);
  }
  return asked;
}

/** The request's AbortSignal: aborted when its client goes. */
function signalOf(context: ServerCallContext): AbortSignal {
  const signal = context.state.get(SIGNAL_KEY);
  return signal instanceof AbortSignal ? signal : new AbortController().signal;
}
