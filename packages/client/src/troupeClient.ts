import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  DEFAULT_TASK_LIMITS,
  errorMessage,
  FINAL_EVENT_KINDS,
  type HumanRequest,
  isName,
  isTaskId,
  type PipelineRegistration,
  type TaskFailureReason,
  type TaskLimits,
  type TaskSubmission,
  type UsageTotals,
  type WorkflowRecord,
} from '@troupe/protocol';
import {
  connectBus,
  createLogger,
  type JetStreamBus,
  type Logger,
  type NatsAccess,
  TransportError,
  ValueStore,
} from '@troupe/runtime/bus';
import {
  type DecidedStatus,
  type HumanReply,
  listHumanRequests,
  readHumanRequest,
  replyToHuman,
} from './humanRequests.ts';
import { OperationError } from './operationError.ts';
import { PipelineRegistry } from './pipelineRegistry.ts';
import { eventsAfter, followTaskEnding, followTaskEvents, type SequencedEvent } from './storedEvents.ts';
import { subTaskReader, withSubTasks } from './subTaskTraces.ts';
import {
  cancelTask,
  noSuchTaskId,
  pauseTask,
  readTask,
  readTaskEvents,
  resumeTask,
  type SteerOptions,
  type Submitted,
  submitToPipeline,
  tellTask,
} from './taskOperations.ts';
import { buildTaskTrace, type TaskTrace, wholeTrace } from './taskTrace.ts';
import { CLIENT_WAIT, openWorkflowStore, readValues } from './troupeState.ts';

/** How often `wait` reads the task's record when it may not read the task's events. */
const RECORD_POLL_MS = 1_000;

/** How many submitted tasks' pipelines a client remembers. */
const REMEMBERED_TASKS = 10_000;

/** The clients `connect` made, whose connection `close` closes. */
const OWN_CONNECTION = new WeakSet<TroupeClient>();

export interface ConnectOptions {
  /** The NATS servers: a URL, a list, or `nats://a:4222,nats://b:4222`. `nats://127.0.0.1:4222` when absent. */
  servers?: string | string[];
  /** How to log in and talk TLS: a user and password, an nkey seed or a `.creds` file's text, and PEM texts. */
  access?: NatsAccess;
  /** The name NATS shows for this connection; `troupe-client` when absent. */
  name?: string;
  /** Where the connection logs (pino); errors only, to stderr, when absent. */
  logger?: Logger;
  /** How long to keep trying to reach the servers before `connect` fails; 0 (fail at once) by default. */
  waitForServerMs?: number;
}

export interface ClientOptions {
  /** Where inputs and outputs too large for a message are stored and read; one on the same connection when absent. */
  values?: ValueStore;
  /** The coordinators' task limits, when they were changed from the protocol's defaults. */
  limits?: TaskLimits;
}

/** A task to submit: its goal, and optionally an id (a fresh one when absent), an input and labels. */
export type NewTask = Omit<TaskSubmission, 'id' | 'parent' | 'inputRef'> & { id?: string };

/** How a task ended: its output when it completed, the reason when it failed. */
export interface TaskResult {
  taskId: string;
  pipeline: string;
  status: 'completed' | 'failed' | 'cancelled';
  /** The final output, read back whole when the task's final event held only a preview of it. */
  output?: string;
  failure?: { reason: TaskFailureReason; message: string };
  usage: UsageTotals;
}

export interface WaitOptions {
  /** The task's pipeline: needed only for a task still queued that this client did not submit. */
  pipeline?: string;
  /** Gives up after this long, with `OperationError` `unavailable`; waits as long as the task runs when absent. */
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface EventsOptions {
  /** The task's pipeline: needed only for a task still queued that this client did not submit. */
  pipeline?: string;
  /** Events stored after this stream sequence (the `seq` of the last one seen): how a dropped reader resumes. */
  after?: number;
  /** Ends the iteration. */
  signal?: AbortSignal;
}

/** The answer to a decision: what the request's record now says, and whose it was. */
export interface Decided {
  request: HumanRequest;
  status: DecidedStatus;
}

/**
 * A typed client of a running Troupe, over NATS alone: what `troupe` (the CLI), the gateway and its A2A and MCP
 * servers do to tasks, for any TypeScript application. Every method throws {@link OperationError} with a stable
 * `code` when the operation changed nothing (`not_found`, `conflict`, `no_coordinator`, `unavailable`, …).
 *
 * ```ts
 * const troupe = await TroupeClient.connect({ servers: 'nats://127.0.0.1:4222' });
 * const { taskId } = await troupe.submit('review', { goal: 'Review the README' });
 * for await (const { event } of troupe.events(taskId)) console.log(event.kind);
 * console.log((await troupe.wait(taskId)).output);
 * await troupe.close();
 * ```
 */
export class TroupeClient {
  /** The connection this client works over; `close` drains it when `connect` made it. */
  readonly bus: JetStreamBus;
  readonly #values: ValueStore;
  readonly #limits: TaskLimits;
  /** The pipelines of the tasks this client submitted lately: a task still queued has no record to say it. */
  readonly #submitted = new Map<string, string>();

  /** A client over a connection the caller made and closes. */
  constructor(bus: JetStreamBus, options: ClientOptions = {}) {
    this.bus = bus;
    this.#values = options.values ?? new ValueStore(bus);
    this.#limits = options.limits ?? DEFAULT_TASK_LIMITS;
  }

  /** Connects to NATS; fails with a `TransportError` (`connect_failed`) naming the servers when none answers. */
  static async connect(options: ConnectOptions = {}, client: ClientOptions = {}): Promise<TroupeClient> {
    const bus = await connectBus({
      servers: options.servers ?? 'nats://127.0.0.1:4222',
      name: options.name ?? 'troupe-client',
      logger: options.logger ?? createLogger({ level: 'error', name: 'troupe-client' }),
      messageLogLevel: 'debug',
      ...(options.access === undefined ? {} : { access: options.access }),
      ...(options.waitForServerMs === undefined ? {} : { waitForServerMs: options.waitForServerMs }),
    });
    const made = new TroupeClient(bus, client);
    OWN_CONNECTION.add(made);
    return made;
  }

  /**
   * Stores a task for a pipeline some coordinator has loaded. An id submitted before is never run again: the answer
   * says `duplicate`, with the task's record when it has one. An input too large for the task message is stored in
   * the pipeline's inputs bucket first. Refused before anything is stored: an unknown pipeline (`not_found`), a task
   * over the limits (`too_large`, `invalid_request`).
   */
  async submit(pipeline: string, task: NewTask): Promise<Submitted> {
    // Set by the client itself (a large input's place) and by pipeline steps (the parent): never by the caller.
    for (const key of ['inputRef', 'parent'] as const) {
      if (key in task) {
        throw new OperationError(
          'invalid_request',
          `a task's ${key} is not the submitter's to give: ${key === 'inputRef' ? 'give input, and one too large for a message is stored for you' : 'only a pipeline step sets it'}`,
        );
      }
    }
    const submitted = await submitToPipeline(
      this.bus,
      pipeline,
      { ...task, id: task.id ?? randomUUID() },
      { values: this.#values, limits: this.#limits },
    );
    this.#submitted.delete(submitted.taskId);
    this.#submitted.set(submitted.taskId, submitted.record?.pipeline ?? pipeline);
    if (this.#submitted.size > REMEMBERED_TASKS)
      this.#submitted.delete(this.#submitted.keys().next().value ?? '');
    return submitted;
  }

  /** The task's record: where it stands (`status`, `state`, `activity`), its usage, its final event once it ended. */
  task(taskId: string): Promise<WorkflowRecord> {
    return readTask(this.bus, taskId);
  }

  /** Every task this server keeps a record of (of one pipeline, or with one status, when asked), newest first. */
  async tasks(
    filter: { pipeline?: string; status?: WorkflowRecord['status'] } = {},
  ): Promise<WorkflowRecord[]> {
    const records = await readValues(await openWorkflowStore(this.bus, CLIENT_WAIT));
    return records
      .filter(
        (r) =>
          (filter.pipeline === undefined || r.pipeline === filter.pipeline) &&
          (filter.status === undefined || r.status === filter.status),
      )
      .sort((a, b) => b.createdAt.localeCompare(a.createdAt) || a.taskId.localeCompare(b.taskId));
  }

  /** How the task ended, or undefined while it runs (or is still queued, when this client submitted it). */
  async result(taskId: string): Promise<TaskResult | undefined> {
    const record = await this.#recordIfAny(taskId);
    if (record) return this.#resultOf(record);
    // Submitted here and not yet taken by a coordinator: it has no record, but it is not unknown.
    if (this.#submitted.has(taskId)) return undefined;
    throw new OperationError('not_found', `no task ${taskId} is known on this server`);
  }

  /**
   * Waits for the task to end and answers how it did. Fails with `OperationError` `unavailable` when `timeoutMs`
   * passes first, and with the signal's reason when it aborts.
   */
  async wait(taskId: string, options: WaitOptions = {}): Promise<TaskResult> {
    // An abort listener never hears a signal aborted already: it is checked here, or the wait would ignore it.
    options.signal?.throwIfAborted();
    const task = await this.#located(taskId, options.pipeline);
    const ended = task.record && (await this.#resultOf(task.record));
    if (ended) return ended;
    const stop = new AbortController();
    const timer =
      options.timeoutMs === undefined
        ? undefined
        : setTimeout(
            () =>
              stop.abort(
                new OperationError(
                  'unavailable',
                  `task ${taskId} did not end within ${options.timeoutMs} ms`,
                ),
              ),
            options.timeoutMs,
          );
    const onAbort = () => stop.abort(options.signal?.reason);
    options.signal?.addEventListener('abort', onAbort, { once: true });
    // Aborted while the task was looked up: the listener came too late to hear it.
    if (options.signal?.aborted) onAbort();
    try {
      // Its task events from the first: the final one is among them however late this reader came. A user who may
      // not read the stored events learns the ending from the task's record instead, read every second.
      await followTaskEnding(this.bus, task, { signal: stop.signal, onEvent: () => undefined }).catch(
        async () => {
          while (!stop.signal.aborted) {
            const record = await this.#recordIfAny(taskId);
            if (record && record.status !== 'running') return;
            await sleep(RECORD_POLL_MS, undefined, { signal: stop.signal }).catch(() => undefined);
          }
        },
      );
      if (stop.signal.aborted) throw stop.signal.reason;
      const last = await this.#resultOf(await readTask(this.bus, taskId));
      if (!last)
        throw new OperationError('unavailable', `task ${taskId} ended but its record does not say so yet`);
      return last;
    } finally {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
    }
  }

  /**
   * The task's events, in the order the `EVENTS` stream stored them: those so far, then each as it comes, ending
   * after the final one (or when `signal` aborts). Each carries its stream sequence: pass the last one seen as
   * `after` to resume where a dropped reader stopped, with nothing lost and nothing twice (with event batching on, a
   * resume half-way through a batch gets its earlier events again: see `SequencedEvent.seq`).
   */
  async *events(taskId: string, options: EventsOptions = {}): AsyncGenerator<SequencedEvent> {
    // An abort listener never hears a signal aborted already: such a reader gets nothing, and nothing is followed.
    if (options.signal?.aborted) return;
    const { after } = options;
    if (after !== undefined && !(Number.isSafeInteger(after) && after >= 0)) {
      throw new OperationError(
        'invalid_request',
        `after is a stream sequence (an integer from 0), not ${after}`,
      );
    }
    const task = await this.#located(taskId, options.pipeline);
    // A reader resuming after the last event of a task that has ended: nothing is to come, so nothing is awaited.
    if (after !== undefined && task.record && task.record.status !== 'running') {
      if ((await eventsAfter(this.bus, task, after)) === 0) return;
    }
    const stop = new AbortController();
    const onAbort = () => stop.abort();
    options.signal?.addEventListener('abort', onAbort, { once: true });
    if (options.signal?.aborted) onAbort();
    const queue: SequencedEvent[] = [];
    let wake: () => void = () => {};
    let finished = false;
    let failure: unknown;
    /** The task's final event was handed on: the following ended because the task did. */
    let ended = false;
    let lastSeq = after;
    const following = followTaskEvents(this.bus, task, {
      signal: stop.signal,
      ...(after === undefined ? {} : { after }),
      onEvent: (event) => {
        queue.push(event);
        wake();
      },
    }).then(
      () => {
        finished = true;
        wake();
      },
      (error: unknown) => {
        failure = error;
        finished = true;
        wake();
      },
    );
    try {
      for (;;) {
        const next = queue.shift();
        if (next) {
          ended = FINAL_EVENT_KINDS.includes(next.event.kind);
          lastSeq = next.seq;
          yield next;
          continue;
        }
        if (finished) break;
        await new Promise<void>((resolve) => (wake = resolve));
      }
      if (failure !== undefined) throw failure;
      // Neither the task's end nor the reader's signal: the connection closed under it, which must not pass for an end.
      if (!ended && !stop.signal.aborted) {
        throw new OperationError(
          'unavailable',
          `the events of task ${taskId} stopped before it ended: the NATS connection closed; resume with { after: ${lastSeq ?? 0} }`,
        );
      }
    } finally {
      options.signal?.removeEventListener('abort', onAbort);
      stop.abort();
      await following;
    }
  }

  /** Asks the coordinator running the task to stop it (`conflict` when it has ended already). */
  async cancel(taskId: string, reason?: string): Promise<void> {
    try {
      await cancelTask(this.bus, taskId, reason);
    } catch (error) {
      // Submitted here and not yet taken: only the coordinator running a task can stop it, and none does yet.
      if (OperationError.is(error, 'not_found') && this.#submitted.has(taskId)) {
        throw new OperationError(
          'not_found',
          `task ${taskId} is still queued: no coordinator has taken it yet, and only the one running it can cancel it; try again once task(${JSON.stringify(taskId)}) finds it`,
          { cause: error },
        );
      }
      throw error;
    }
  }

  /**
   * Holds a running task once its step at work has finished its current model or tool call, until {@link resume};
   * recorded before the answer, so it holds across a restart (`conflict` when it is held already, or has ended).
   *
   * @example
   * ```ts
   * await troupe.pause(taskId, { reason: 'check the plan first', by: 'ana' });
   * ```
   */
  pause(taskId: string, options: SteerOptions & { reason?: string } = {}): Promise<void> {
    return pauseTask(this.bus, taskId, options);
  }

  /** Lets a paused task go on from where it was held (`conflict` when it is not paused). */
  resume(taskId: string, options: SteerOptions = {}): Promise<void> {
    return resumeTask(this.bus, taskId, options);
  }

  /**
   * Tells the agent at work in a running task something: it reads it before its next model call, as a user turn (the
   * next agent step does when none is at work). Answers with the message's id, which `task.told` and `agent.told` name.
   */
  tell(taskId: string, text: string, options: SteerOptions = {}): Promise<{ messageId: string }> {
    return tellTask(this.bus, taskId, text, options);
  }

  /** What people are asked and have not answered (or ever were, with `all`), of one task when asked. */
  approvals(filter: { taskId?: string; all?: boolean } = {}): Promise<HumanRequest[]> {
    return listHumanRequests(this.bus, filter);
  }

  /**
   * Decides an approval (`{ kind: 'approval', decision: { decision: 'allow' | 'deny', reason?, by? } }`) or answers
   * a question (`{ kind: 'question', answer: { answer, by? } }`). The decision is recorded first, so it holds whether
   * or not the agent is listening now; `conflict` when it was decided already or has expired.
   */
  async decide(requestId: string, reply: HumanReply): Promise<Decided> {
    const outcome = await replyToHuman(this.bus, requestId, reply);
    return { request: outcome.request, status: outcome.status };
  }

  /** The human request named, or undefined. */
  request(requestId: string): Promise<HumanRequest | undefined> {
    return readHumanRequest(this.bus, requestId);
  }

  /**
   * The task's trace: each step with its model calls, tool calls and decisions, the flow's shape (routes, branches,
   * items, joins), sub-tasks' traces in their steps, and the totals, with the outputs its events name by reference
   * read back whole.
   */
  async trace(taskId: string): Promise<TaskTrace> {
    const record = await readTask(this.bus, taskId);
    const trace = buildTaskTrace(taskId, await readTaskEvents(this.bus, taskId, record.pipeline));
    const versioned = record.version === undefined ? trace : { ...trace, version: record.version };
    const nested = await withSubTasks(versioned, subTaskReader(this.bus));
    return wholeTrace(nested, (ref) => this.#values.read(ref));
  }

  /** The pipelines the coordinators on this server have loaded, by name. */
  async pipelines(): Promise<PipelineRegistration[]> {
    try {
      return await (await PipelineRegistry.open(this.bus, CLIENT_WAIT)).all();
    } catch (error) {
      if (TransportError.is(error, 'bucket_missing')) {
        throw new OperationError('no_coordinator', `no Troupe coordinator has run on this server yet`, {
          cause: error,
        });
      }
      throw new OperationError('unavailable', `cannot read the pipelines: ${errorMessage(error)}`, {
        cause: error,
      });
    }
  }

  /** Closes the connection, when this client made it (`connect`); a connection passed in is left to its owner. */
  async close(): Promise<void> {
    if (OWN_CONNECTION.has(this)) await this.bus.close();
  }

  /**
   * Where a task's events are: the pipeline its record names; for a task still queued (no record yet), the one asked
   * for, or the one this client submitted it to.
   */
  async #located(
    taskId: string,
    pipeline?: string,
  ): Promise<{ taskId: string; pipeline: string; record?: WorkflowRecord }> {
    // A wildcard id would follow other tasks' events.
    if (!isTaskId(taskId)) throw noSuchTaskId(taskId);
    const record = await this.#recordIfAny(taskId);
    if (record) return { taskId, pipeline: record.pipeline, record };
    const queued = pipeline ?? this.#submitted.get(taskId);
    // A wildcard would follow other pipelines' events, and the server refuses such a filter anyway.
    if (queued !== undefined && !isName(queued))
      throw new OperationError('not_found', `no pipeline can be named ${JSON.stringify(queued)}`);
    if (queued === undefined) {
      throw new OperationError(
        'not_found',
        `no task ${taskId} is known on this server (one still queued is found with its pipeline: pass { pipeline })`,
      );
    }
    return { taskId, pipeline: queued };
  }

  #recordIfAny(taskId: string): Promise<WorkflowRecord | undefined> {
    return readTask(this.bus, taskId).catch((error: unknown) => {
      if (OperationError.is(error, 'not_found')) return undefined;
      throw error;
    });
  }

  async #resultOf(record: WorkflowRecord): Promise<TaskResult | undefined> {
    if (record.status === 'running') return undefined;
    const base = {
      taskId: record.taskId,
      pipeline: record.pipeline,
      status: record.status,
      usage: record.usage,
    };
    const final = record.final;
    if (final?.kind === 'task.completed') {
      const { output, outputRef } = final.data;
      return { ...base, output: outputRef ? await this.#values.read(outputRef).catch(() => output) : output };
    }
    if (final?.kind === 'task.failed')
      return { ...base, failure: { reason: final.data.reason, message: final.data.message } };
    return base;
  }
}
